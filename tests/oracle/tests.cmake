# Float64 oracle (tests/oracle/oracle.py): its own invariants, and the engine held to it.
add_test(NAME oracle_self_test
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/oracle/self_test.py)
set_tests_properties(oracle_self_test PROPERTIES TIMEOUT 120)

add_test(NAME oracle_exactness
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/oracle/check_engine.py
                 --bin ${CMAKE_BINARY_DIR}/bin --work ${CMAKE_BINARY_DIR}/test_data/oracle)
set_tests_properties(oracle_exactness PROPERTIES TIMEOUT 300)
