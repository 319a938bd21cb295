// The CPU backend: runs a contiguous range of decoder layers on a batch of sequence slices with the
// host thread pool, weights read in place from the mmapped checkpoint. [0,a) then [a,L) equals [0,L).
#ifndef LAYERPIPE_ENGINE_CPU_CPU_BACKEND_H_
#define LAYERPIPE_ENGINE_CPU_CPU_BACKEND_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/cpu/aligned_vector.h"
#include "engine/cpu/attention_tasks.h"
#include "engine/cpu/joined_order.h"
#include "engine/cpu/thread_pool.h"
#include "engine/cpu/kv_cache.h"
#include "engine/backend/layer_backend.h"
#include "engine/model/precision.h"
#include "engine/model/weights.h"

namespace layerpipe {

class CpuBackend final : public LayerBackend {
 public:
  // Serves the layers of weights.selection(); uses the embedding / head when the selection maps them.
  // Matrices may be stored tiled (ModelWeights::matrices_tiled) or row-major, in either precision.
  CpuBackend(const ModelWeights& weights, Precision precision, ThreadPool& pool);

  std::string device() const override { return "cpu"; }
  std::unique_ptr<SequenceState> NewSequence() const override;
  absl::StatusOr<std::unique_ptr<SequenceState>> NewSequenceFrom(const PrefixSnapshot& prefix) const override;
  bool keeps_prefixes() const override { return true; }
  absl::Status Forward(absl::Span<const SequenceSlice> slices, float* hidden) override;
  absl::Status Embed(absl::Span<const int32_t> ids, float* hidden) override;
  absl::Status EmbedImage(const ImageView& image, float* out) override;
  absl::Status EmbedAudio(const float* samples, int64_t tokens, float* out) override;
  absl::Status Logits(const float* hidden, int64_t rows, float* logits) override;

  // Wall time every CpuBackend of this process has spent in attention (scores, softmax, weighting and
  // KV stores) and in the layers' matmuls, for benchmarks' breakdowns.
  static int64_t attention_nanos();
  static int64_t matmul_nanos();

  const ModelWeights& weights() const override { return w_; }
  Precision precision() const override { return precision_; }

 private:
  void RunLayer(int layer, absl::Span<const SequenceSlice> slices, const std::vector<int64_t>& positions,
                float* hidden);
  void Matmul(const float* x, int64_t m, const WeightMatrix& w, float* y);

  const ModelWeights& w_;
  const ModelConfig& cfg_;
  Precision precision_;
  ThreadPool& pool_;
  std::vector<double> inv_freq_sliding_, inv_freq_full_;
  // The full layers' joined K/V rows, where the model has them (engine/model/kv_bytes.h KvJoinedValues).
  std::optional<JoinedOrder> joined_order_;
  // Scratch reused across steps (a stage runs one step at a time).
  // Rows the kernels read and write whole vectors of start on cache lines.
  AlignedVector<float> a_, q_, k_, v_, attn_, o_, g_, u_;
  // The last layer's rows that get outputs (SequenceSlice::outputs) when not all of them: their rows of
  // a_ for q_proj, then their hidden rows for the rest of the layer.
  AlignedVector<float> gathered_;
  std::vector<int64_t> query_rows_;
  std::vector<float> cs_sliding_, cs_full_, normed_;
  AttentionRunner attention_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CPU_CPU_BACKEND_H_
