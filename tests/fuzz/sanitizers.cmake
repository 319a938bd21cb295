# Included by the top-level CMakeLists.txt when LAYERPIPE_FUZZ is on, before any target is defined: every
# library a fuzz target links is compiled with coverage for libFuzzer (fuzzer-no-link) and with ASan and
# UBSan; UBSan aborts on its first report, so that libFuzzer counts it as a crash. The fuzz executables
# add -fsanitize=fuzzer (tests/fuzz/CMakeLists.txt). Build only the fuzz targets in such a build dir
# (tests/fuzz/run_fuzzers.sh does), not the whole project.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "LAYERPIPE_FUZZ needs clang (libFuzzer): configure a build dir of its own with "
                      "-DCMAKE_CXX_COMPILER=clang++ -DLAYERPIPE_CUDA=OFF -DLAYERPIPE_FUZZ=ON")
endif()
set(LAYERPIPE_SANITIZERS address,undefined)
add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link,${LAYERPIPE_SANITIZERS}>
                    $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>
                    $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
add_link_options(-fsanitize=${LAYERPIPE_SANITIZERS})
