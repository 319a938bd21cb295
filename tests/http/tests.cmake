# The OpenAI-compatible HTTP API end to end: the official `openai` npm client and curl against a cluster
# (scripts/fetch_openai_client.sh installs the client).
add_test(NAME http_api
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/http/http_api_test.py
                 --bin ${CMAKE_BINARY_DIR}/bin --src ${PROJECT_SOURCE_DIR}
                 --work ${CMAKE_BINARY_DIR}/test_data/http)
set_tests_properties(http_api PROPERTIES TIMEOUT 600)
