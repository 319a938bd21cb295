target_link_libraries(planner_test PRIVATE layerpipe_coordinator_lib)
add_test(NAME coordinator_behaviour
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/coordinator/coordinator_behaviour_test.py
                 --bin ${CMAKE_BINARY_DIR}/bin --src ${PROJECT_SOURCE_DIR}
                 --work ${CMAKE_BINARY_DIR}/test_data/coordinator)
set_tests_properties(coordinator_behaviour PROPERTIES TIMEOUT 300)
