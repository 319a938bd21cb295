# The worker tests start workers in-process, so they link the worker library.
foreach(t worker_units_test worker_pipeline_test)
  if(TARGET ${t})
    target_link_libraries(${t} PRIVATE layerpipe_worker_lib)
  endif()
endforeach()
