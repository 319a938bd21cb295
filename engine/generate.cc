#include "engine/generate.h"

#include <chrono>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/backend/head_ops.h"
#include "engine/sampling/head.h"
#include "engine/sampling/text_stream.h"

namespace layerpipe {
namespace {

// One step of `in` and the token `sampler` picks, through the same head as the pipeline's last stage
// (engine/sampling/head.h): on a GPU a sampler that works from a summary keeps the 1 MiB logits row on
// the device.
absl::StatusOr<int32_t> NextToken(Engine& engine, const StepInput& in, Sampler& sampler,
                                  absl::Span<const int32_t> history) {
  auto hidden = engine.LastHidden({&in, 1});
  if (!hidden.ok()) return hidden.status();
  const SampleRow row{&sampler, history, hidden->data(), /*top_logprobs=*/0, /*logprobs=*/false};
  std::vector<SampledToken> out;
  const ModelConfig& c = engine.config();
  if (auto st = SampleRows(HeadOpsOf(engine.executor()), c.hidden_size, c.vocab_size, {&row, 1}, 1, &out); !st.ok()) {
    return st;
  }
  return out[0].token;
}

}  // namespace

absl::StatusOr<GenerateResult> Generate(Engine& engine, const Tokenizer* tokenizer, const GenerateRequest& request,
                                        const std::function<void(std::string_view)>& on_text) {
  const ModelConfig& cfg = engine.config();
  if (request.prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  if (request.stop.max_new_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max new tokens must be positive, got ", request.stop.max_new_tokens));
  }
  if (int64_t(request.prompt.size()) + request.stop.max_new_tokens > cfg.max_position_embeddings) {
    return absl::OutOfRangeError(absl::StrCat("prompt of ", request.prompt.size(), " tokens plus ",
                                              request.stop.max_new_tokens, " new tokens exceeds the context of ",
                                              cfg.max_position_embeddings));
  }
  if (auto st = ValidateSamplingParams(request.sampling); !st.ok()) return st;
  if (auto st = engine.ValidateIds(request.prompt); !st.ok()) return st;

  Sampler sampler(request.sampling, static_cast<int>(cfg.vocab_size));
  TextStream text(tokenizer, request.stop);

  auto kv = engine.NewSequence();
  std::vector<int32_t> history = request.prompt;
  std::vector<int32_t> next = request.prompt;
  GenerateResult result;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Clock::time_point first_token;
  absl::Span<const SoftSpan> soft = request.soft;
  for (;;) {
    StepInput in{kv.get(), next, soft};
    soft = {};
    auto id_or = NextToken(engine, in, sampler, history);
    if (!id_or.ok()) return id_or.status();
    const int32_t id = *id_or;
    if (result.ids.empty()) first_token = Clock::now();
    result.ids.push_back(id);
    history.push_back(id);
    const TextStream::Step step = text.Push(id);
    if (on_text && !step.text.empty()) on_text(step.text);
    if (on_text && !step.final_text.empty()) on_text(step.final_text);
    if (step.reason != StopChecker::Reason::kNone) {
      result.finish_reason = step.reason == StopChecker::Reason::kMaxTokens ? "length" : "stop";
      break;
    }
    next.assign(1, id);
  }
  result.prefill_seconds = std::chrono::duration<double>(first_token - start).count();
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - first_token).count();
  return result;
}

}  // namespace layerpipe
