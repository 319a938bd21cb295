# CUDA backend tests. cuda_backend_test and cuda_sampling_test need a device and is labelled "gpu" (CI runs ctest -LE gpu);
# step_plan_test checks the backend's host-side planning and runs anywhere the backend builds.
if(LAYERPIPE_HAVE_CUDA)
  # step_plan.cc is host-only C++: compiled in, since the plugin exports nothing of it.
  add_executable(cuda_backend_test ${CMAKE_CURRENT_LIST_DIR}/cuda_backend_test.cc)
  add_executable(cuda_sampling_test ${CMAKE_CURRENT_LIST_DIR}/cuda_sampling_test.cc)
  add_executable(step_plan_test ${CMAKE_CURRENT_LIST_DIR}/step_plan_test.cc ${PROJECT_SOURCE_DIR}/engine/cuda/step_plan.cc)
  target_link_libraries(cuda_backend_test PRIVATE layerpipe_cuda)
  target_link_libraries(cuda_sampling_test PRIVATE layerpipe_cuda)
  foreach(name cuda_backend_test cuda_sampling_test step_plan_test)
    target_link_libraries(${name} PRIVATE layerpipe_engine GTest::gtest GTest::gtest_main)
    target_compile_definitions(${name} PRIVATE
      LAYERPIPE_BIN_DIR="${CMAKE_BINARY_DIR}/bin"
      LAYERPIPE_TOKENIZER_PATH="${LAYERPIPE_TOKENIZER_JSON}")
  endforeach()
  # The peer-link tests need to know whether the plugin has NCCL (engine/cuda/CMakeLists.txt).
  if(LAYERPIPE_NCCL_INCLUDE_DIR AND LAYERPIPE_NCCL_LIBRARY)
    target_compile_definitions(cuda_backend_test PRIVATE LAYERPIPE_HAVE_NCCL)
  endif()
  gtest_discover_tests(cuda_backend_test DISCOVERY_TIMEOUT 60 PROPERTIES LABELS gpu)
  gtest_discover_tests(cuda_sampling_test DISCOVERY_TIMEOUT 60 PROPERTIES LABELS gpu)
  gtest_discover_tests(step_plan_test DISCOVERY_TIMEOUT 60)
endif()
