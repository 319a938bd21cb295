// Log-probabilities from a row of softcapped logits: the model's own distribution, before any
// sampling filter or repetition penalty, which is what a client asking for logprobs wants to see.
#ifndef LAYERPIPE_ENGINE_SAMPLING_LOGPROBS_H_
#define LAYERPIPE_ENGINE_SAMPLING_LOGPROBS_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/sampling/logit_summary.h"

namespace layerpipe {

// log Σ exp(row[i]) in double; NaN entries count as -inf. -inf when nothing is finite.
double LogSumExp(absl::Span<const float> row);

struct IdLogprob {
  int32_t id;
  float logprob;
};

// The k ids with the highest logits (ties to the lower id), best first, each with row[id] - lse.
std::vector<IdLogprob> TopLogprobs(absl::Span<const float> row, int k, double lse);
// The same from those best entries already chosen (a LogitRowSummary's top_raw).
std::vector<IdLogprob> TopLogprobs(absl::Span<const ScoredId> best, double lse);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_SAMPLING_LOGPROBS_H_
