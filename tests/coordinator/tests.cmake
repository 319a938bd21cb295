# The scheduling tests link only the pure scheduling library; the planner test too.
foreach(t planner_test kv_admission_test scheduler_test prefix_cache_test)
  target_link_libraries(${t} PRIVATE layerpipe_scheduling)
endforeach()
# The job store test also builds foreign databases with sqlite3, which layerpipe_job_store brings.
target_link_libraries(job_store_test PRIVATE layerpipe_job_store)
# The page tokens are the coordinator's (its protos).
target_link_libraries(job_listing_test PRIVATE layerpipe_coordinator_lib)
add_test(NAME coordinator_behaviour
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/coordinator/coordinator_behaviour_test.py
                 --bin ${CMAKE_BINARY_DIR}/bin --src ${PROJECT_SOURCE_DIR}
                 --work ${CMAKE_BINARY_DIR}/test_data/coordinator)
set_tests_properties(coordinator_behaviour PROPERTIES TIMEOUT 300)
# Jobs through coordinator kills and restarts (--state-dir), retention, and databases that are not ours.
add_test(NAME durable_jobs
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/coordinator/durable_jobs_test.py
                 --bin ${CMAKE_BINARY_DIR}/bin --src ${PROJECT_SOURCE_DIR}
                 --work ${CMAKE_BINARY_DIR}/test_data/durable_jobs)
set_tests_properties(durable_jobs PROPERTIES TIMEOUT 600)
