// The whole model in one process: weights of every layer, the embedding and the tied head.
#ifndef LAYERPIPE_ENGINE_ENGINE_H_
#define LAYERPIPE_ENGINE_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model/config.h"
#include "engine/cpu/thread_pool.h"
#include "engine/backend/layer_backend.h"
#include "engine/sampling/logit_summary.h"
#include "engine/model/precision.h"
#include "engine/model/soft_tokens.h"
#include "engine/model/weights.h"

namespace layerpipe {

struct EngineOptions {
  Precision precision = Precision::kBf16;
  int threads = 0;              // 0: LAYERPIPE_THREADS or all cores
  int64_t prefill_chunk = 512;  // tokens of one sequence per forward step
  BackendMaker make_backend;    // empty: the CPU executor
  bool huge_pages = true;       // CPU executor: weights copied into huge pages (false: read in place)
  WeightFormat quantize = WeightFormat::kBf16;  // decoder matrices quantized at load (kBf16: as stored)
  WeightFormat quantize_head = WeightFormat::kBf16;  // the embedding / tied head likewise (kInt8 or kBf16)
};

// New tokens for one sequence in a step (a prompt, a prompt chunk, or one decode token), with the soft
// tokens among them (offsets into ids; the images and samples they point at outlive the call).
struct StepInput {
  SequenceState* kv;
  absl::Span<const int32_t> ids;
  absl::Span<const SoftSpan> soft = {};
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Load(const std::string& model_dir, const EngineOptions& options);

  const ModelConfig& config() const { return config_; }
  const EngineOptions& options() const { return options_; }
  std::unique_ptr<SequenceState> NewSequence() const { return executor_->NewSequence(); }
  // A sequence that continues from a snapshot of another (SequenceState::Snapshot): the prefix cache.
  absl::StatusOr<std::unique_ptr<SequenceState>> NewSequenceFrom(const PrefixSnapshot& prefix) const {
    return executor_->NewSequenceFrom(prefix);
  }

  // Runs every input's ids (prefill and decode mixed; long inputs in prefill_chunk pieces) and returns
  // the logits after each input's last id: [inputs][vocab].
  absl::StatusOr<std::vector<std::vector<float>>> Step(absl::Span<const StepInput> inputs);

  // Step, returning for each input the LogitRowSummary requests[i] asks for (computed where the logits
  // are: on a GPU only the summaries leave the device). With `last_hidden`, also each input's final
  // hidden row ([inputs][hidden]), from which Logits() gives the whole row when a summary cannot say.
  absl::StatusOr<std::vector<LogitRowSummary>> StepSummaries(absl::Span<const StepInput> inputs,
                                                             absl::Span<const LogitRowRequest> requests,
                                                             std::vector<float>* last_hidden = nullptr);
  // Step, returning each input's final hidden row instead of its logits: [inputs][hidden], for the
  // sampling head (engine/sampling/head.h).
  absl::StatusOr<std::vector<float>> LastHidden(absl::Span<const StepInput> inputs);

  // Softcapped logits of `rows` final hidden rows (as StepSummaries returns them): [rows][vocab].
  absl::StatusOr<std::vector<float>> Logits(const std::vector<float>& hidden, int64_t rows);

  // Logits at every position of a fresh sequence: [ids][vocab].
  absl::StatusOr<std::vector<float>> Score(absl::Span<const int32_t> ids, absl::Span<const SoftSpan> soft = {});

  // InvalidArgument naming the first id outside the vocabulary.
  absl::Status ValidateIds(absl::Span<const int32_t> ids) const;

  LayerBackend& executor() { return *executor_; }
  const ModelWeights& weights() const { return *weights_; }

 private:
  Engine() = default;
  // Runs `inputs` like Step, handing each forward pass's finished inputs (their last hidden rows, in
  // the order of `finished`) to `head`.
  using HeadFn = std::function<absl::Status(const std::vector<float>& rows, const std::vector<size_t>& finished)>;
  absl::Status Advance(absl::Span<const StepInput> inputs, const HeadFn& head);

  ModelConfig config_;
  EngineOptions options_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<LayerBackend> executor_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_ENGINE_H_
