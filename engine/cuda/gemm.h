// y[m, n] = x[m, k] · Wᵀ through cuBLASLt, W row-major [n, k] (the checkpoint layout), fp32 output and
// fp32 accumulation. x and W are both bf16 (the bf16 mode) or both fp32 (the fp32 mode, which keeps
// fp32 copies of the weights on the device and computes in true fp32: CUBLAS_COMPUTE_32F, no TF32).
#ifndef LAYERPIPE_ENGINE_CUDA_GEMM_H_
#define LAYERPIPE_ENGINE_CUDA_GEMM_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/cuda/device_buffer.h"

namespace layerpipe::cuda {

class Gemm {
 public:
  static absl::StatusOr<std::unique_ptr<Gemm>> Create();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Plans (descriptors and the heuristic's algorithm) are cached per shape, so a shape always runs the
  // same algorithm, and a call during graph capture only enqueues the matmul.
  absl::Status Run(const void* x, const void* w, bool bf16, int64_t m, int64_t n, int64_t k, float* y,
                   cudaStream_t stream);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, bool>;

  Gemm() = default;
  absl::StatusOr<const Plan*> PlanFor(int64_t m, int64_t n, int64_t k, bool bf16);
  static void Destroy(Plan& p);

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<Key, Plan> plans_;
};

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_GEMM_H_
