// The decode loop of one sequence: prefill, sample, stream text, stop.
#ifndef LAYERPIPE_ENGINE_GENERATE_H_
#define LAYERPIPE_ENGINE_GENERATE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/stop_conditions.h"
#include "engine/tokenizer/tokenizer.h"

namespace layerpipe {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  std::vector<SoftSpan> soft;  // the prompt's soft tokens (their images and samples outlive the call)
  SamplingParams sampling;
  StopConfig stop;  // stop.max_new_tokens must be > 0
};

struct GenerateResult {
  std::vector<int32_t> ids;   // generated ids, including a final stop id if one ended the run
  std::string finish_reason;  // "stop" (stop id or string) or "length"
  double prefill_seconds = 0;  // prompt forward pass up to the first sampled token
  double decode_seconds = 0;   // everything after
};

// Streams text through on_text as it completes (never half a UTF-8 character, never part of a stop
// string). Without a tokenizer only ids are produced and stop strings are not checked.
absl::StatusOr<GenerateResult> Generate(Engine& engine, const Tokenizer* tokenizer, const GenerateRequest& request,
                                        const std::function<void(std::string_view)>& on_text);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_GENERATE_H_
