# crash_inputs_test (tests/fuzz/crash_inputs_test.cc, an ordinary GoogleTest of this build): every input
# of crashes/ through the public API its fuzz target calls, expecting the precise error. It checks
# CheckFrameContent too, so it links the worker library.
if(TARGET crash_inputs_test)
  target_link_libraries(crash_inputs_test PRIVATE layerpipe_worker_lib layerpipe_media)
  target_compile_definitions(crash_inputs_test PRIVATE
    LAYERPIPE_FUZZ_CRASHES_DIR="${CMAKE_CURRENT_LIST_DIR}/crashes")
endif()

# fuzz_smoke: the fuzz targets, built in a clang build dir of their own (fuzz-build, under this one: the
# project's libraries are compiled with this build's compiler, the fuzz build needs clang and the
# sanitizers), each replaying crashes/<target>/, then fuzzing for LAYERPIPE_FUZZ_SMOKE_SECONDS on its seed
# corpus (which it runs through first). Skipped (77) without clang or libFuzzer.
# RUN_SERIAL: the clang build takes both cores of a small CI machine, so no other test runs beside it
# (and, being a test, it starts only after scripts/build.sh has built everything else).
# On by default where clang++ and its libFuzzer runtime are installed (scripts/install_deps.sh installs
# clang and libclang-rt-14-dev). Measured on 2 cores: the clang build of a fresh fuzz-build takes ~95 s
# (~220 s of CPU; up to 5 min when the machine is shared), an incremental one seconds; the run ~70 s (six
# targets at 10 s each, after their crashes/ replay and corpus).
set(layerpipe_fuzz_smoke_default OFF)
find_program(LAYERPIPE_CLANGXX clang++)
if(LAYERPIPE_CLANGXX)
  execute_process(COMMAND ${LAYERPIPE_CLANGXX} -print-file-name=libclang_rt.fuzzer-x86_64.a
                  OUTPUT_VARIABLE layerpipe_fuzzer_runtime OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(EXISTS "${layerpipe_fuzzer_runtime}")
    set(layerpipe_fuzz_smoke_default ON)
  endif()
endif()
option(LAYERPIPE_FUZZ_SMOKE "run tests/fuzz/run_fuzzers.sh in ctest (on when clang++ and libFuzzer are found)"
       ${layerpipe_fuzz_smoke_default})
set(LAYERPIPE_FUZZ_SMOKE_SECONDS 10 CACHE STRING "seconds fuzz_smoke fuzzes each target for")
if(LAYERPIPE_FUZZ OR NOT LAYERPIPE_FUZZ_SMOKE)
  return()  # the fuzz build itself, or not asked for
endif()
add_test(NAME fuzz_smoke
         COMMAND bash ${PROJECT_SOURCE_DIR}/tests/fuzz/run_fuzzers.sh ${LAYERPIPE_FUZZ_SMOKE_SECONDS}
                 ${CMAKE_BINARY_DIR}/fuzz-build)
set_tests_properties(fuzz_smoke PROPERTIES LABELS fuzz TIMEOUT 900 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
