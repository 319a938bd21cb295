# The worker tests start workers in-process (and the process test runs the executable), so they link
# the worker library.
foreach(t worker_units_test worker_pipeline_test worker_process_test device_handoff_test prefix_store_test
          stage_prefix_test)
  if(TARGET ${t})
    target_link_libraries(${t} PRIVATE layerpipe_worker_lib)
  endif()
endforeach()
if(TARGET worker_process_test)
  add_dependencies(worker_process_test layerpipe-worker)
endif()
