// y[m, n] = x[m, k] · Wᵀ through cuBLASLt, W row-major [n, k] (the checkpoint layout), fp32 output and
// fp32 accumulation; optionally W given as [k, n], accumulating into y, or batched (GemmOptions). x and W are both bf16 (the bf16 mode) or both fp32 (the fp32 mode, which keeps
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

struct GemmOptions {
  bool w_is_kn = false;     // W row-major [k, n] (y = x · W) instead of [n, k]
  bool accumulate = false;  // y += x · Wᵀ instead of y =
  int batch = 1;            // independent products, each operand's batches back to back
};

class Gemm {
 public:
  static absl::StatusOr<std::unique_ptr<Gemm>> Create();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Plans (descriptors and the heuristic's algorithm) are cached per shape, so a shape always runs the
  // same algorithm, and a call during graph capture only enqueues the matmul.
  absl::Status Run(const void* x, const void* w, bool bf16, int64_t m, int64_t n, int64_t k, float* y,
                   cudaStream_t stream, const GemmOptions& options = {});

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, int>;

  Gemm() = default;
  absl::StatusOr<const Plan*> PlanFor(int64_t m, int64_t n, int64_t k, bool bf16, bool w_is_kn, int batch);
  static void Destroy(Plan& p);

  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<Key, Plan> plans_;
};

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_GEMM_H_
