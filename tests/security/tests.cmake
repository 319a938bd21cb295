# TLS, mutual TLS, bearer tokens and per-client limits (docs/security.md).
# Unit tests: the GoogleTest binaries made from tests/security/*_test.cc need the libraries they test.
target_link_libraries(tls_test PRIVATE layerpipe_common)
target_compile_definitions(tls_test PRIVATE
  LAYERPIPE_MAKE_TEST_CERTS="${PROJECT_SOURCE_DIR}/tests/security/make_test_certs.sh")
target_link_libraries(auth_tokens_test PRIVATE layerpipe_coordinator_lib)
target_link_libraries(client_gate_test PRIVATE layerpipe_coordinator_lib)
# The refusals end to end: workers and a coordinator with mutual TLS, TLS and tokens on 127.0.0.1.
add_test(NAME security_end_to_end
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/security/security_test.py
                 --bin ${CMAKE_BINARY_DIR}/bin --src ${PROJECT_SOURCE_DIR}
                 --work ${CMAKE_BINARY_DIR}/test_data/security)
set_tests_properties(security_end_to_end PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE)
