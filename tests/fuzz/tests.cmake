# The fuzz targets, built in a clang build dir of their own (fuzz-build, under this one: the project's
# libraries are compiled with this build's compiler, the fuzz build needs clang and the sanitizers) and
# each run for 15 s on its seed corpus after replaying crashes/<target>/. Skipped (77) without clang.
# RUN_SERIAL: the clang build takes both cores of a small CI machine.
# Off by default until the inputs in crashes/ stop crashing project code (crashes/README.md lists
# the defects, from the reliability issue): run_fuzzers.sh replays them first, so it cannot pass before.
option(LAYERPIPE_FUZZ_SMOKE "run tests/fuzz/run_fuzzers.sh in ctest (needs clang)" OFF)
if(LAYERPIPE_FUZZ OR NOT LAYERPIPE_FUZZ_SMOKE)
  return()  # the fuzz build itself, or not asked for
endif()
add_test(NAME fuzz_smoke
         COMMAND bash ${PROJECT_SOURCE_DIR}/tests/fuzz/run_fuzzers.sh 15 ${CMAKE_BINARY_DIR}/fuzz-build)
set_tests_properties(fuzz_smoke PROPERTIES LABELS fuzz TIMEOUT 900 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
