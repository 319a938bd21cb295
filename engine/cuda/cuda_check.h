// Turns CUDA runtime and cuBLAS error codes into absl::Status, so every device call in the backend can
// fail the step cleanly instead of aborting the worker.
#ifndef LAYERPIPE_ENGINE_CUDA_CUDA_CHECK_H_
#define LAYERPIPE_ENGINE_CUDA_CUDA_CHECK_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace layerpipe::cuda {

inline absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  const absl::StatusCode code =
      e == cudaErrorMemoryAllocation ? absl::StatusCode::kResourceExhausted : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

inline absl::Status CublasStatus(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const absl::StatusCode code =
      e == CUBLAS_STATUS_ALLOC_FAILED ? absl::StatusCode::kResourceExhausted : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(what, ": cuBLAS status ", static_cast<int>(e)));
}

}  // namespace layerpipe::cuda

#define LP_CUDA_RETURN_IF_ERROR(expr)                                                   \
  do {                                                                                  \
    if (absl::Status _lp_st = ::layerpipe::cuda::CudaStatus((expr), #expr); !_lp_st.ok()) \
      return _lp_st;                                                                    \
  } while (0)

#define LP_CUBLAS_RETURN_IF_ERROR(expr)                                                   \
  do {                                                                                    \
    if (absl::Status _lp_st = ::layerpipe::cuda::CublasStatus((expr), #expr); !_lp_st.ok()) \
      return _lp_st;                                                                      \
  } while (0)

#define LP_RETURN_IF_ERROR(expr)                 \
  do {                                           \
    if (absl::Status _lp_st = (expr); !_lp_st.ok()) \
      return _lp_st;                             \
  } while (0)

#endif  // LAYERPIPE_ENGINE_CUDA_CUDA_CHECK_H_
