# The CUDA backend on the CUDA emulator (tests/cuda_emu/README.md): the plugin's own sources — kernels
# translated to host C++ by translate_cu.py — linked against an emulated CUDA runtime and cuBLASLt, and
# the GPU tests run against it on a machine without a GPU. Needs only the toolkit's headers.
if(LAYERPIPE_HAVE_CUDA)
  set(LPEMU_DIR ${CMAKE_CURRENT_LIST_DIR})
  find_package(Python3 REQUIRED COMPONENTS Interpreter)

  add_library(lpemu_cudart SHARED ${LPEMU_DIR}/block_exec.cc ${LPEMU_DIR}/fiber_switch.cc
                                  ${LPEMU_DIR}/runtime_state.cc ${LPEMU_DIR}/runtime_device.cc
                                  ${LPEMU_DIR}/runtime_memory.cc ${LPEMU_DIR}/runtime_streams.cc
                                  ${LPEMU_DIR}/cublaslt.cc)
  target_include_directories(lpemu_cudart PUBLIC ${PROJECT_SOURCE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(lpemu_cudart PRIVATE Threads::Threads)
  # NCCL's header comes with the toolkit on the machine image; with it the emulated plugin has peer
  # links across devices, as the real one has with NCCL.
  find_path(LPEMU_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  if(LPEMU_NCCL_INCLUDE_DIR)
    target_sources(lpemu_cudart PRIVATE ${LPEMU_DIR}/nccl.cc)
    target_include_directories(lpemu_cudart PUBLIC ${LPEMU_NCCL_INCLUDE_DIR})
    set(LPEMU_NCCL_DEFINITION LAYERPIPE_HAVE_NCCL)
  endif()
  set_target_properties(lpemu_cudart PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)

  # The plugin's sources: host C++ as they are, kernels (.cu) through the translator.
  get_target_property(lpemu_plugin_sources layerpipe_cuda SOURCES)
  set(lpemu_sources)
  foreach(src ${lpemu_plugin_sources})
    get_filename_component(abs ${src} ABSOLUTE BASE_DIR ${PROJECT_SOURCE_DIR}/engine/cuda)
    get_filename_component(name ${src} NAME_WE)
    if(src MATCHES "\\.cu$")
      set(out ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu/${name}.cc)
      add_custom_command(OUTPUT ${out}
        COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu
        COMMAND ${Python3_EXECUTABLE} ${LPEMU_DIR}/translate_cu.py ${abs} ${out}
        DEPENDS ${abs} ${LPEMU_DIR}/translate_cu.py
        COMMENT "Translating ${name}.cu for the CUDA emulator")
      list(APPEND lpemu_sources ${out})
      set_source_files_properties(${out} PROPERTIES COMPILE_OPTIONS "-Wno-unknown-pragmas")
    else()
      list(APPEND lpemu_sources ${abs})
    endif()
  endforeach()

  add_library(layerpipe_cuda_emu SHARED ${lpemu_sources})
  set_target_properties(layerpipe_cuda_emu PROPERTIES POSITION_INDEPENDENT_CODE ON
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_link_options(layerpipe_cuda_emu PRIVATE -Wl,--exclude-libs,ALL -Wl,--no-undefined
    -Wl,--version-script=${PROJECT_SOURCE_DIR}/engine/cuda/plugin_exports.map)
  target_link_libraries(layerpipe_cuda_emu PUBLIC layerpipe_engine lpemu_cudart)
  target_compile_definitions(layerpipe_cuda_emu PRIVATE LAYERPIPE_CUDA_EMULATOR ${LPEMU_NCCL_DEFINITION})

  # The emulator's own tests, a .cu file translated like the kernels.
  set(lpemu_self_test ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu/emulator_test.cc)
  add_custom_command(OUTPUT ${lpemu_self_test}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu
    COMMAND ${Python3_EXECUTABLE} ${LPEMU_DIR}/translate_cu.py ${LPEMU_DIR}/emulator_test.cu ${lpemu_self_test}
    DEPENDS ${LPEMU_DIR}/emulator_test.cu ${LPEMU_DIR}/translate_cu.py
    COMMENT "Translating emulator_test.cu for the CUDA emulator")
  add_executable(cuda_emulator_test ${lpemu_self_test})
  target_link_libraries(cuda_emulator_test PRIVATE lpemu_cudart GTest::gtest GTest::gtest_main)
  gtest_discover_tests(cuda_emulator_test DISCOVERY_TIMEOUT 60 PROPERTIES LABELS emu)

  # The GPU tests, unchanged, on the emulator (labelled "emu"; CI runs them).
  foreach(name cuda_backend_test cuda_gemm_attention_test cuda_sampling_test)
    add_executable(${name}_emu ${PROJECT_SOURCE_DIR}/tests/gpu/${name}.cc)
    target_link_libraries(${name}_emu PRIVATE layerpipe_cuda_emu lpemu_cudart layerpipe_engine GTest::gtest
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
  target_link_libraries(bench_cuda_emu PRIVATE layerpipe_cuda_emu lpemu_cudart layerpipe_engine absl::flags
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
           COMMAND bash ${LPEMU_DIR}/cluster_check.sh ${CMAKE_BINARY_DIR}/bin ${CMAKE_BINARY_DIR}/test_data/cuda_emu_cluster)
  set_tests_properties(cuda_emu_cluster PROPERTIES TIMEOUT 600 LABELS emu
    ENVIRONMENT "LAYERPIPE_CUDA_PLUGIN=${CMAKE_BINARY_DIR}/bin/liblayerpipe_cuda_emu.so")
endif()
