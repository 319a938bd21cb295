#include "engine/cuda/tied_embedding.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/host_step.h"
#include "engine/cuda/kernels.h"
#include "engine/model/bf16.h"

namespace layerpipe::cuda {

absl::Status TiedEmbedding::Embed(absl::Span<const int32_t> ids, float* hidden) {
  if (dw_.embed().rows == 0 || !w_.selection().embedding) {
    return absl::FailedPreconditionError("this stage does not hold the embedding");
  }
  const int64_t H = cfg_.hidden_size;
  for (size_t r = 0; r < ids.size(); ++r) {
    if (ids[r] < 0 || ids[r] >= cfg_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", ids[r], " at index ", r, " is outside the vocabulary [0, ", cfg_.vocab_size, ")"));
    }
  }
  if (ids.empty()) return absl::OkStatus();
  LP_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const int64_t rows = static_cast<int64_t>(ids.size());
  bool moved = false;
  LP_RETURN_IF_ERROR(ids_.EnsureAtLeast(rows * sizeof(int32_t), &moved));
  LP_RETURN_IF_ERROR(logits_.EnsureAtLeast(rows * H * sizeof(float), &moved));
  // The reference casts the scale to the weight dtype: 62.0 for 3840.
  const float scale = Bf16ToF32(F32ToBf16(static_cast<float>(std::sqrt(double(H)))));
  LP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ids_.get(), ids.data(), rows * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  LP_CUDA_RETURN_IF_ERROR(LaunchEmbed(dw_.embed().data.get(), !dw_.fp32(), ids_.as<int32_t>(), rows, H, scale,
                                      logits_.as<float>(), stream_));
  LP_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(hidden, logits_.get(), rows * H * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  LP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status TiedEmbedding::RunHead(const float* hidden, int64_t rows) {
  if (dw_.embed().rows == 0 || !w_.selection().head || w_.final_norm().empty()) {
    return absl::FailedPreconditionError("this stage does not hold the head");
  }
  LP_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  bool moved = false;
  // Reuses the step scratch: h and x hold the rows, logits_ the result.
  StepShape shape;
  shape.rows = rows;
  LP_RETURN_IF_ERROR(scratch_->Ensure(shape));
  LP_RETURN_IF_ERROR(logits_.EnsureAtLeast(rows * V * sizeof(float), &moved));
  const StepBuffers& s = scratch_->buffers();
  LP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.h.get(), hidden, rows * H * sizeof(float), cudaMemcpyHostToDevice, stream_));
  LP_CUDA_RETURN_IF_ERROR(
      LaunchRmsNorm(s.h.as<float>(), dw_.final_norm(), rows, H, cfg_.rms_norm_eps, s.x.get(), bf16_, stream_));
  LP_RETURN_IF_ERROR(gemm_->Run(s.x.get(), dw_.embed().data.get(), bf16_, rows, V, H, logits_.as<float>(), stream_));
  const float cap = static_cast<float>(cfg_.final_logit_softcapping);
  if (cap > 0) LP_CUDA_RETURN_IF_ERROR(LaunchSoftcap(logits_.as<float>(), rows * V, cap, stream_));
  return absl::OkStatus();
}

absl::Status TiedEmbedding::Logits(const float* hidden, int64_t rows, float* logits) {
  if (rows < 0) return absl::InvalidArgumentError("negative row count");
  if (rows == 0) return absl::OkStatus();
  LP_RETURN_IF_ERROR(RunHead(hidden, rows));
  LP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits, logits_.get(), rows * cfg_.vocab_size * sizeof(float),
                                          cudaMemcpyDeviceToHost, stream_));
  LP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status TiedEmbedding::SummarizeLogits(const float* hidden, absl::Span<const LogitRowRequest> requests,
                                            std::vector<LogitRowSummary>* out) {
  absl::StatusOr<SummaryCaps> caps = CheckSummaryRequests(requests, cfg_.vocab_size);
  if (!caps.ok()) return caps.status();
  out->clear();
  if (requests.empty()) return absl::OkStatus();
  const int64_t rows = static_cast<int64_t>(requests.size());
  LP_RETURN_IF_ERROR(RunHead(hidden, rows));
  return summaries_.Run(logits_.as<float>(), cfg_.vocab_size, requests, *caps, stream_, out);
}

}  // namespace layerpipe::cuda
