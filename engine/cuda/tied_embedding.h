// The tied embedding matrix at both ends of the model on the device: the first stage's Embed (token
// ids to scaled hidden rows) and the last stage's head (final norm, the tied matmul and the softcap)
// whose logits are either downloaded whole or summarised where they are (device_summaries.h). Neither
// end runs in a decode graph, so the head borrows the step scratch for its rows and one buffer serves
// both ends' device output.
#ifndef LAYERPIPE_ENGINE_CUDA_TIED_EMBEDDING_H_
#define LAYERPIPE_ENGINE_CUDA_TIED_EMBEDDING_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_summaries.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/step_scratch.h"
#include "engine/model/weights.h"
#include "engine/sampling/logit_summary.h"

namespace layerpipe::cuda {

class TiedEmbedding {
 public:
  // `bf16`: the head's matmul input is rounded to bf16 (the bf16 precision mode).
  TiedEmbedding(const ModelWeights& w, const DeviceWeights& dw, int device, bool bf16, StepScratch* scratch,
                Gemm* gemm, cudaStream_t stream)
      : w_(w), cfg_(w.config()), dw_(dw), device_(device), bf16_(bf16), scratch_(scratch), gemm_(gemm),
        stream_(stream) {}

  // LayerBackend's Embed, Logits and SummarizeLogits, host rows in and out.
  absl::Status Embed(absl::Span<const int32_t> ids, float* hidden);
  absl::Status Logits(const float* hidden, int64_t rows, float* logits);
  absl::Status SummarizeLogits(const float* hidden, absl::Span<const LogitRowRequest> requests,
                               std::vector<LogitRowSummary>* out);

 private:
  // Final norm, tied head and softcap of `rows` host hidden rows into logits_ (left on the device).
  absl::Status RunHead(const float* hidden, int64_t rows);

  const ModelWeights& w_;
  const ModelConfig& cfg_;
  const DeviceWeights& dw_;
  int device_;
  bool bf16_;
  StepScratch* scratch_;
  Gemm* gemm_;
  cudaStream_t stream_;
  DeviceBuffer ids_, logits_;
  DeviceSummaries summaries_;
};

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_TIED_EMBEDDING_H_
