// One pipeline stage's compute: the sequences it holds (KV caches; on the last stage also token
// history and samplers) and how a step frame runs through its layer range. Single-threaded: the
// worker's compute thread is the only caller.
#ifndef LAYERPIPE_WORKER_STAGE_H_
#define LAYERPIPE_WORKER_STAGE_H_

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "engine/backend/layer_backend.h"
#include "engine/sampling/head.h"
#include "engine/sampling/logprobs.h"
#include "engine/model/precision.h"
#include "engine/sampling/sampler.h"
#include "engine/model/weights.h"
#include "proto/internal.pb.h"
#include "worker/frame_check.h"
#include "worker/prefix_store.h"

namespace layerpipe {

// A step's activations into a stage: decoded from the frame, or rows a device link delivered.
struct StageInput {
  std::vector<float> hidden;
  std::unique_ptr<DeviceRows> device;
};

struct StageOptions {
  int stage = 0;
  bool first = false;  // embeds the ids
  bool last = false;   // applies the head and samples
  Precision precision = Precision::kBf16;
  int64_t kv_budget_bytes = 0;
  int64_t prefix_cache_bytes = 0;  // the prefix snapshots' own budget (0: the stage keeps none)
};

class Stage {
 public:
  // Rows of hidden states that go through the head together: the head streams the whole embedding
  // matrix per call, while the logits of a block take rows × vocab floats (64 MiB for the real model).
  static constexpr int64_t kHeadRowsPerCall = 64;

  // `backend` runs the layers of `weights` (and holds on to them by reference).
  Stage(std::shared_ptr<const ModelWeights> weights, const StageOptions& options,
        std::unique_ptr<LayerBackend> backend);

  const StageOptions& options() const { return options_; }
  StageShape shape() const;
  // What this stage sends downstream: always fp32 (see stage.cc). Receivers accept bf16 too.
  internal::v1::HiddenDType wire_dtype() const;

  // Runs a frame that passed CheckFrameContent; `input` is its activations (ignored on the first
  // stage). On success fills *forward (not last: the frame for the next stage) or *result (last).
  // With `device_out` (only for a backend with device_handoff()), a stage that is not the last leaves
  // its output rows there instead of in forward->hidden. Refusals made before the layers run (unknown
  // sequence, position mismatch, KV budget) leave every sequence as it was.
  absl::Status Run(const internal::v1::StepFrame& frame, StageInput input, internal::v1::StepFrame* forward, internal::v1::StepResult* result,
                   std::shared_ptr<const DeviceRows>* device_out = nullptr);

  // Shared with a device-link hop, which may still be sending when the stage is replaced.
  const std::shared_ptr<LayerBackend>& backend() { return executor_; }

  // Forgets the listed kept prefixes (the coordinator evicted them); keys it does not keep are ignored.
  void DropPrefixes(const google::protobuf::RepeatedField<uint64_t>& keys);
  // Frees the listed sequences; ids the stage does not hold are ignored.
  void Release(const google::protobuf::RepeatedField<uint64_t>& seq_ids);

  // Bytes the sequences hold alone: pages they share with a kept prefix count in prefix_bytes() once.
  int64_t kv_bytes_used() const { return kv_bytes_used_; }
  int64_t prefix_bytes() const { return prefixes_.bytes(); }
  // The part of kv_bytes_used() in sliding-window rings; the rest is full-attention pages.
  int64_t kv_sliding_bytes_used() const { return kv_sliding_bytes_used_; }
  int sequences() const { return static_cast<int>(sequences_.size()); }
  // Tokens the stage holds for a sequence; -1 when it holds none.
  int64_t SequenceLength(uint64_t seq_id) const;
  const PrefixStore& prefixes() const { return prefixes_; }

 private:
  struct Sequence {
    std::unique_ptr<SequenceState> kv;
    int64_t kv_bytes = 0;
    int64_t kv_sliding_bytes = 0;  // of kv_bytes
    // Of kv_bytes, the pages a kept prefix counts (the one it started from, or the longest it kept).
    int64_t shared_bytes = 0;
    // Last stage only: every id the sequence has fed (prompt and generated tokens come back as
    // slice ids), for the repetition penalty; and its sampler, made on first use.
    std::vector<int32_t> history;
    std::unique_ptr<Sampler> sampler;
  };

  // The per-slice sequence state to run, creating (but not yet keeping) new sequences.
  absl::Status PrepareSequences(const internal::v1::StepFrame& frame, std::vector<std::unique_ptr<Sequence>>* fresh,
                                std::vector<Sequence*>* seqs);
  absl::Status CheckKvBudget(const internal::v1::StepFrame& frame, const std::vector<Sequence*>& seqs) const;
  // KvSharedBytesAtCut on this stage's layers.
  int64_t SharedBytes(int64_t cut) const;
  // The slices' save_prefix, once they ran (the last stage after its head, so the history holds them).
  void KeepPrefixes(const internal::v1::StepFrame& frame, const std::vector<Sequence*>& seqs);
  // Logits, sampling and scores of the last stage.
  // Fills a SliceResult's sampled token, its log-probability and the top log-probabilities.
  static void SetSampled(const SampledToken& token, internal::v1::SliceResult* res);
  absl::Status RunHead(const internal::v1::StepFrame& frame, const std::vector<Sequence*>& seqs, const float* hidden,
               internal::v1::StepResult* result);

  std::shared_ptr<const ModelWeights> weights_;
  StageOptions options_;
  std::shared_ptr<LayerBackend> executor_;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> sequences_;
  PrefixStore prefixes_;
  int64_t kv_bytes_used_ = 0;
  int64_t kv_sliding_bytes_used_ = 0;
  std::vector<float> logits_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_WORKER_STAGE_H_
