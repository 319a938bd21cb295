# The registry and HTTP endpoint unit tests need the common library; the multi-process test scrapes a
# real cluster's /metrics endpoints.
target_link_libraries(metrics_test PRIVATE layerpipe_common)
add_test(NAME metrics_end_to_end
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/metrics/metrics_test.py
                 --bin ${CMAKE_BINARY_DIR}/bin --work ${CMAKE_BINARY_DIR}/test_data/metrics)
set_tests_properties(metrics_end_to_end PROPERTIES TIMEOUT 300)
target_link_libraries(worker_metrics_test PRIVATE layerpipe_worker_lib)
target_link_libraries(coordinator_metrics_test PRIVATE layerpipe_coordinator_lib)
