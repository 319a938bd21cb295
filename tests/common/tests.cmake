# common/ is linked by the servers, not by the engine the other unit tests link.
if(TARGET log_test)
  target_link_libraries(log_test PRIVATE layerpipe_log)
endif()
if(TARGET child_process_test)
  target_link_libraries(child_process_test PRIVATE layerpipe_common)
endif()
