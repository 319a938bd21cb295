// Runs a contiguous range of decoder layers on a batch of sequence slices: hidden states in, hidden
// states out. This is the unit a pipeline stage serves; [0,a) then [a,L) equals [0,L).
#ifndef LAYERPIPE_ENGINE_LAYER_EXECUTOR_H_
#define LAYERPIPE_ENGINE_LAYER_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/cpu/thread_pool.h"
#include "engine/kv_cache.h"
#include "engine/precision.h"
#include "engine/weights.h"

namespace layerpipe {

// n new tokens of one sequence, at positions kv->length() .. kv->length() + n - 1.
struct SequenceSlice {
  SequenceKv* kv;
  int64_t n;
};

class LayerRangeExecutor {
 public:
  // Serves the layers of weights.selection(); uses the embedding / head when the selection maps them.
  LayerRangeExecutor(const ModelWeights& weights, Precision precision, ThreadPool& pool);

  std::unique_ptr<SequenceKv> NewSequence() const;

  // hidden: [sum of n, hidden_size], rows in slice order; updated in place. Appends each slice's keys and
  // values to its caches and advances its length. A sequence may appear once per call.
  absl::Status Forward(absl::Span<const SequenceSlice> slices, float* hidden);

  // First stage: h = E[id] · bf16(sqrt(hidden)). Ids must be in the vocabulary (checked).
  absl::Status Embed(absl::Span<const int32_t> ids, float* hidden) const;

  // Last stage: softcapped logits of `rows` hidden rows into logits [rows, vocab].
  void Logits(const float* hidden, int64_t rows, float* logits);

  const ModelWeights& weights() const { return w_; }
  Precision precision() const { return precision_; }
  int layer_begin() const { return w_.selection().layer_begin; }
  int layer_end() const { return w_.selection().layer_end; }

 private:
  void RunLayer(int layer, absl::Span<const SequenceSlice> slices, const std::vector<int64_t>& positions,
                float* hidden);
  void Matmul(const float* x, int64_t m, const Bf16Matrix& w, float* y);

  const ModelWeights& w_;
  const ModelConfig& cfg_;
  Precision precision_;
  ThreadPool& pool_;
  std::vector<double> inv_freq_sliding_, inv_freq_full_;
  // Scratch reused across steps (a stage runs one step at a time).
  std::vector<float> a_, q_, k_, v_, attn_, o_, g_, u_, cs_sliding_, cs_full_, normed_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_LAYER_EXECUTOR_H_
