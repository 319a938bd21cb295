#include "engine/engine.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/cpu/cpu_backend.h"

namespace layerpipe {

absl::StatusOr<std::unique_ptr<Engine>> Engine::Load(const std::string& model_dir, const EngineOptions& options) {
  if (options.prefill_chunk <= 0) return absl::InvalidArgumentError("prefill chunk must be positive");
  auto config = LoadModelConfig(model_dir);
  if (!config.ok()) return config.status();
  auto e = std::unique_ptr<Engine>(new Engine());
  e->config_ = *config;
  e->options_ = options;
  WeightSelection sel{0, config->num_layers, /*embedding=*/true, /*head=*/true};
  const bool cpu = !options.make_backend;
  auto weights = ModelWeights::Load(
      model_dir, e->config_, sel,
      {.huge_pages = options.huge_pages && cpu,
       .tile_layer_matrices = cpu,
       .quantize = options.quantize,
       .quantize_head = options.quantize_head});
  if (!weights.ok()) return weights.status();
  e->weights_ = std::move(*weights);
  e->pool_ = std::make_unique<ThreadPool>(options.threads);
  if (options.make_backend) {
    auto backend = options.make_backend(*e->weights_, options.precision, *e->pool_);
    if (!backend.ok()) return backend.status();
    e->executor_ = std::move(*backend);
  } else {
    e->executor_ = std::make_unique<CpuBackend>(*e->weights_, options.precision, *e->pool_);
  }
  return e;
}

absl::Status Engine::ValidateIds(absl::Span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= config_.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", ids[i], " at index ", i, " is outside the vocabulary [0, ", config_.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::Advance(absl::Span<const StepInput> inputs, const HeadFn& head) {
  const int64_t H = config_.hidden_size;
  // Validate everything first so a bad input never leaves a sequence half-advanced.
  for (const StepInput& in : inputs) {
    if (in.ids.empty()) return absl::InvalidArgumentError("a step input has no tokens");
    if (auto st = ValidateIds(in.ids); !st.ok()) return st;
  }
  std::vector<size_t> done(inputs.size(), 0);
  std::vector<float> hidden;
  const int64_t frame = config_.audio.samples_per_token;
  for (;;) {
    std::vector<SequenceSlice> slices;
    std::vector<int32_t> ids;
    std::vector<SoftSpan> soft;
    std::vector<std::vector<PositionRange>> blocks;
    std::vector<size_t> which;
    blocks.reserve(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const StepInput& in = inputs[i];
      const int64_t total = static_cast<int64_t>(in.ids.size()), begin = static_cast<int64_t>(done[i]);
      if (begin == total) continue;
      // A chunk never cuts an image: its soft tokens must all see each other in one pass.
      const int64_t n = ChunkEnd(in.soft, begin, total, options_.prefill_chunk) - begin;
      for (SoftSpan& sp : SpansIn(in.soft, begin, begin + n, frame)) {
        sp.offset += static_cast<int64_t>(ids.size());
        soft.push_back(sp);
      }
      blocks.push_back(ImageBlocks(SpansIn(in.soft, begin, begin + n, frame), in.kv->length()));
      // Only a slice that ends its input needs a row out of the last layer (its logits).
      slices.push_back({in.kv, n, blocks.back(), begin + n == total ? 1 : 0});
      ids.insert(ids.end(), in.ids.begin() + begin, in.ids.begin() + begin + n);
      which.push_back(i);
    }
    if (slices.empty()) break;
    hidden.resize(ids.size() * H);
    if (auto st = executor_->EmbedInputs(ids, soft, hidden.data()); !st.ok()) return st;
    if (auto st = executor_->Forward(slices, hidden.data()); !st.ok()) return st;
    // The head streams the whole embedding matrix, so the rows that need logits go through it together.
    std::vector<float> last_rows;
    std::vector<size_t> finished;
    int64_t row = 0;
    for (size_t s = 0; s < slices.size(); ++s) {
      const size_t i = which[s];
      row += slices[s].n;
      done[i] += slices[s].n;
      if (done[i] == inputs[i].ids.size()) {
        last_rows.insert(last_rows.end(), hidden.begin() + (row - 1) * H, hidden.begin() + row * H);
        finished.push_back(i);
      }
    }
    if (!finished.empty()) {
      if (auto st = head(last_rows, finished); !st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<float>>> Engine::Step(absl::Span<const StepInput> inputs) {
  const int64_t V = config_.vocab_size;
  std::vector<std::vector<float>> logits(inputs.size());
  auto head = [&](const std::vector<float>& rows, const std::vector<size_t>& finished) -> absl::Status {
    std::vector<float> out(finished.size() * V);
    if (auto st = executor_->Logits(rows.data(), static_cast<int64_t>(finished.size()), out.data()); !st.ok()) {
      return st;
    }
    for (size_t f = 0; f < finished.size(); ++f) logits[finished[f]].assign(out.begin() + f * V, out.begin() + (f + 1) * V);
    return absl::OkStatus();
  };
  if (auto st = Advance(inputs, head); !st.ok()) return st;
  return logits;
}

absl::StatusOr<std::vector<float>> Engine::Logits(const std::vector<float>& hidden, int64_t rows) {
  if (rows < 0 || static_cast<size_t>(rows * config_.hidden_size) != hidden.size()) {
    return absl::InvalidArgumentError(absl::StrCat(hidden.size(), " hidden values are not ", rows, " rows"));
  }
  std::vector<float> logits(static_cast<size_t>(rows * config_.vocab_size));
  if (auto st = executor_->Logits(hidden.data(), rows, logits.data()); !st.ok()) return st;
  return logits;
}

absl::StatusOr<std::vector<float>> Engine::LastHidden(absl::Span<const StepInput> inputs) {
  const int64_t H = config_.hidden_size;
  std::vector<float> hidden(inputs.size() * H);
  auto head = [&](const std::vector<float>& rows, const std::vector<size_t>& finished) -> absl::Status {
    for (size_t f = 0; f < finished.size(); ++f) {
      std::copy_n(rows.begin() + f * H, H, hidden.begin() + finished[f] * H);
    }
    return absl::OkStatus();
  };
  if (auto st = Advance(inputs, head); !st.ok()) return st;
  return hidden;
}

absl::StatusOr<std::vector<LogitRowSummary>> Engine::StepSummaries(absl::Span<const StepInput> inputs,
                                                                  absl::Span<const LogitRowRequest> requests,
                                                                  std::vector<float>* last_hidden) {
  if (requests.size() != inputs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(requests.size(), " logit requests for ", inputs.size(), " step inputs"));
  }
  std::vector<LogitRowSummary> summaries(inputs.size());
  const int64_t H = config_.hidden_size;
  if (last_hidden != nullptr) last_hidden->assign(inputs.size() * H, 0.0f);
  auto head = [&](const std::vector<float>& rows, const std::vector<size_t>& finished) -> absl::Status {
    if (last_hidden != nullptr) {
      for (size_t f = 0; f < finished.size(); ++f) {
        std::copy_n(rows.begin() + f * H, H, last_hidden->begin() + finished[f] * H);
      }
    }
    std::vector<LogitRowRequest> wanted;
    for (size_t i : finished) wanted.push_back(requests[i]);
    std::vector<LogitRowSummary> out;
    if (auto st = executor_->SummarizeLogits(rows.data(), wanted, &out); !st.ok()) return st;
    for (size_t f = 0; f < finished.size(); ++f) summaries[finished[f]] = std::move(out[f]);
    return absl::OkStatus();
  };
  if (auto st = Advance(inputs, head); !st.ok()) return st;
  return summaries;
}

absl::StatusOr<std::vector<float>> Engine::Score(absl::Span<const int32_t> ids, absl::Span<const SoftSpan> soft) {
  if (ids.empty()) return absl::InvalidArgumentError("no token ids to score");
  if (auto st = ValidateIds(ids); !st.ok()) return st;
  const int64_t H = config_.hidden_size, V = config_.vocab_size, total = static_cast<int64_t>(ids.size());
  auto kv = NewSequence();
  std::vector<float> logits(ids.size() * V);
  std::vector<float> hidden;
  for (int64_t p = 0; p < total;) {
    const int64_t n = ChunkEnd(soft, p, total, options_.prefill_chunk) - p;
    const std::vector<SoftSpan> spans = SpansIn(soft, p, p + n, config_.audio.samples_per_token);
    const std::vector<PositionRange> blocks = ImageBlocks(spans, kv->length());
    hidden.resize(n * H);
    if (auto st = executor_->EmbedInputs(ids.subspan(p, n), spans, hidden.data()); !st.ok()) return st;
    SequenceSlice slice{kv.get(), n, blocks};
    if (auto st = executor_->Forward({&slice, 1}, hidden.data()); !st.ok()) return st;
    if (auto st = executor_->Logits(hidden.data(), n, logits.data() + p * V); !st.ok()) return st;
    p += n;
  }
  return logits;
}

}  // namespace layerpipe
