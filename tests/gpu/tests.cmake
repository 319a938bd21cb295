# CUDA backend tests. The cuda_*_test programs need a device and are labelled "gpu" (CI runs
# ctest -LE gpu; tests/gpu/run.sh runs them on the device machine); tests/cuda_emu builds the same sources
# against the CUDA emulator as cuda_*_test_emu, which CI runs. step_plan_test and peer_link_id_test
# check host-side parts of the backend and run anywhere it builds.
if(LAYERPIPE_HAVE_CUDA)
  set(LAYERPIPE_GPU_TESTS cuda_backend_test cuda_gemm_attention_test cuda_multimodal_test cuda_sampling_test)
  # step_plan.cc is host-only C++: compiled in, since the plugin exports nothing of it.
  add_executable(step_plan_test ${CMAKE_CURRENT_LIST_DIR}/step_plan_test.cc ${PROJECT_SOURCE_DIR}/engine/cuda/step_plan.cc)
  add_executable(peer_link_id_test ${CMAKE_CURRENT_LIST_DIR}/peer_link_id_test.cc
                 ${PROJECT_SOURCE_DIR}/engine/cuda/links/peer_link_id.cc)
  foreach(name ${LAYERPIPE_GPU_TESTS})
    add_executable(${name} ${CMAKE_CURRENT_LIST_DIR}/${name}.cc)
    target_link_libraries(${name} PRIVATE layerpipe_cuda)
  endforeach()
  target_sources(cuda_gemm_attention_test PRIVATE ${PROJECT_SOURCE_DIR}/engine/cuda/step_plan.cc)
  foreach(name ${LAYERPIPE_GPU_TESTS} step_plan_test peer_link_id_test)
    target_link_libraries(${name} PRIVATE layerpipe_engine layerpipe_checkpoint_writer GTest::gtest GTest::gtest_main)
    target_compile_definitions(${name} PRIVATE
      LAYERPIPE_BIN_DIR="${CMAKE_BINARY_DIR}/bin"
      LAYERPIPE_TOKENIZER_PATH="${LAYERPIPE_TOKENIZER_JSON}")
  endforeach()
  # A two-process check of the CUDA IPC event behaviour the same-device link relies on (run.sh runs it).
  add_executable(ipc_event_check ${CMAKE_CURRENT_LIST_DIR}/ipc_event_check.cu)
  target_link_libraries(ipc_event_check PRIVATE CUDA::cudart)
  # The peer-link tests need to know whether the plugin has NCCL (engine/cuda/CMakeLists.txt).
  if(LAYERPIPE_NCCL_INCLUDE_DIR AND LAYERPIPE_NCCL_LIBRARY)
    target_compile_definitions(cuda_backend_test PRIVATE LAYERPIPE_HAVE_NCCL)
  endif()
  foreach(name ${LAYERPIPE_GPU_TESTS})
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS gpu)
  endforeach()
  gtest_discover_tests(step_plan_test DISCOVERY_TIMEOUT 60)
  gtest_discover_tests(peer_link_id_test DISCOVERY_TIMEOUT 60)
endif()
