# The GPU tests on the CUDA emulator (tools/cuda_emu, README.md there), on a machine without a GPU: the
# emulator's own tests, the cuda_*_test programs, the oracle check, bench_cuda and GPU clusters.
if(TARGET layerpipe_cuda_emu)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  set(LPEMU_TESTS ${CMAKE_CURRENT_LIST_DIR})
  # The emulator's own tests, a .cu file translated like the kernels.
  set(lpemu_self_test ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu/emulator_test.cc)
  add_custom_command(OUTPUT ${lpemu_self_test}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu
    COMMAND ${Python3_EXECUTABLE} ${LPEMU_TRANSLATOR} ${LPEMU_TESTS}/emulator_test.cu ${lpemu_self_test}
    DEPENDS ${LPEMU_TESTS}/emulator_test.cu ${LPEMU_TRANSLATOR}
    COMMENT "Translating emulator_test.cu for the CUDA emulator")
  add_executable(cuda_emulator_test ${lpemu_self_test})
  target_link_libraries(cuda_emulator_test PRIVATE lpemu_cudart GTest::gtest GTest::gtest_main)
  gtest_discover_tests(cuda_emulator_test DISCOVERY_TIMEOUT 60 PROPERTIES LABELS emu)

  # The GPU tests, unchanged, on the emulator (labelled "emu"; CI runs them).
  foreach(name cuda_backend_test cuda_gemm_attention_test cuda_multimodal_test cuda_sampling_test)
    add_executable(${name}_emu ${PROJECT_SOURCE_DIR}/tests/gpu/${name}.cc)
    target_link_libraries(${name}_emu PRIVATE layerpipe_cuda_emu lpemu_cudart layerpipe_engine layerpipe_checkpoint_writer GTest::gtest
                                              GTest::gtest_main)
    target_compile_definitions(${name}_emu PRIVATE LAYERPIPE_CUDA_EMULATOR ${LPEMU_NCCL_DEFINITION}
      LAYERPIPE_BIN_DIR="${CMAKE_BINARY_DIR}/bin"
      LAYERPIPE_TOKENIZER_PATH="${LAYERPIPE_TOKENIZER_JSON}")
    # Two emulated devices, so the tests that link stages on two GPUs run too.
    # The prefix keeps their names apart from the gpu-labelled originals (ctest sets properties by name).
    gtest_discover_tests(${name}_emu TEST_PREFIX "emu/" DISCOVERY_TIMEOUT 60
                         PROPERTIES LABELS emu ENVIRONMENT LPEMU_DEVICE_COUNT=2)
  endforeach()
  target_sources(cuda_gemm_attention_test_emu PRIVATE ${PROJECT_SOURCE_DIR}/engine/cuda/step_plan.cc)

  # bench_cuda end to end on a small checkpoint: what run.sh runs on the 12B shape must not fail there
  # for a reason the emulator can show (its figures here mean nothing).
  add_executable(bench_cuda_emu ${PROJECT_SOURCE_DIR}/bench/gpu/bench_cuda.cc)
  target_link_libraries(bench_cuda_emu PRIVATE layerpipe_cuda_emu lpemu_cudart layerpipe_engine layerpipe_checkpoint_writer absl::flags
                                               absl::flags_parse)
  add_test(NAME bench_cuda_emu_smoke
           COMMAND bash -c "set -e; rm -rf \"$1\"; \"$0/layerpipe\" make-checkpoint --out \"$1\" --layers 4 --hidden 128 \
--intermediate 256 --vocab 2048 --heads 4 --head-dim 32 --kv-heads 2 --global-head-dim 64 --global-kv-heads 1 --window 16 \
--full-period 2 >/dev/null; \"$0/bench_cuda_emu\" --model \"$1\" --prompt_tokens 96 --batches 1,3 --context 40 --decode_tokens 4"
                   ${CMAKE_BINARY_DIR}/bin ${CMAKE_BINARY_DIR}/test_data/bench_cuda_emu)
  set_tests_properties(bench_cuda_emu_smoke PROPERTIES TIMEOUT 300 LABELS emu)

  # The CUDA backend against the float64 oracle, through the `layerpipe` command with the emulated
  # plugin in place of the real one (tests/gpu/run.sh runs the same check on a GPU).
  add_test(NAME oracle_exactness_cuda_emu
           COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/oracle/check_engine.py --device cuda
                   --bin ${CMAKE_BINARY_DIR}/bin --work ${CMAKE_BINARY_DIR}/test_data/oracle_cuda_emu)
  set_tests_properties(oracle_exactness_cuda_emu PROPERTIES TIMEOUT 600 LABELS emu
    ENVIRONMENT "LAYERPIPE_CUDA_PLUGIN=${CMAKE_BINARY_DIR}/bin/liblayerpipe_cuda_emu.so")

  # The multi-process cluster tests with GPU workers (worker i on emulated cuda:(i % 2), so three and four
  # workers mix NCCL and CUDA IPC links), held to the single-process CUDA engine: greedy through 1-4
  # workers in both precisions, Score, `layerpipe cluster`, and kill -9 of a worker mid-generation with a
  # restart that re-links and replays. (Concurrent clients, jobs and bad input pass too; left out for
  # CI time: 5 more minutes.)
  add_test(NAME cluster_end_to_end_cuda_emu
           COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/cluster/cluster_test.py --devices cuda:0,cuda:1
                   --bin ${CMAKE_BINARY_DIR}/bin --src ${PROJECT_SOURCE_DIR}
                   --work ${CMAKE_BINARY_DIR}/test_data/cluster_cuda_emu --only greedy score cluster_command restart)
  set_tests_properties(cluster_end_to_end_cuda_emu PROPERTIES TIMEOUT 1500 LABELS emu COST 2000
    ENVIRONMENT "LAYERPIPE_CUDA_PLUGIN=${CMAKE_BINARY_DIR}/bin/liblayerpipe_cuda_emu.so;LPEMU_DEVICE_COUNT=2")

  # tests/gpu/run.sh itself, parts 1 to 3, on the emulated builds: a mistake in the script must not cost
  # a device run.
  add_test(NAME gpu_run_sh_emulated COMMAND bash ${PROJECT_SOURCE_DIR}/tests/gpu/run.sh --emulator)
  # COST: the longest test of the suite; started first, it runs beside the short ones.
  set_tests_properties(gpu_run_sh_emulated PROPERTIES TIMEOUT 900 LABELS emu COST 1000
    ENVIRONMENT "BUILD_DIR=${CMAKE_BINARY_DIR};LAYERPIPE_GPU_WORK=${CMAKE_BINARY_DIR}/test_data/gpu_run_sh")

  # Two GPU workers in two processes, linked by CUDA IPC (one device) and by NCCL (two devices).
  add_test(NAME cuda_emu_cluster
           COMMAND bash ${LPEMU_TESTS}/cluster_check.sh ${CMAKE_BINARY_DIR}/bin ${CMAKE_BINARY_DIR}/test_data/cuda_emu_cluster)
  set_tests_properties(cuda_emu_cluster PROPERTIES TIMEOUT 600 LABELS emu
    ENVIRONMENT "LAYERPIPE_CUDA_PLUGIN=${CMAKE_BINARY_DIR}/bin/liblayerpipe_cuda_emu.so")
endif()
