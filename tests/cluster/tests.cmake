# Multi-process cluster tests: workers, a coordinator and the layerpipe client commands on 127.0.0.1 with
# ephemeral ports, held to the local engine (tests/cluster/cluster_test.py says what is checked). RUN_SERIAL:
# they start many processes on a small machine, and the worker-kill tests are timing-sensitive.
add_test(NAME cluster_end_to_end
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/cluster/cluster_test.py
                 --bin ${CMAKE_BINARY_DIR}/bin --src ${PROJECT_SOURCE_DIR}
                 --work ${CMAKE_BINARY_DIR}/test_data/cluster)
set_tests_properties(cluster_end_to_end PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE)
