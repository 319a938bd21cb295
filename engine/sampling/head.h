// The head's sampling side, one implementation for the last pipeline stage (worker/stage.cc) and
// single-process generation (engine/generate.cc): for each row whose next token is sampled, a logit
// summary decides when the sampler can work from one (computed where the logits are: on a GPU only the
// summary leaves the device), and the whole row of logits otherwise — also when a top-p nucleus reaches
// past the summary's best entries.
#ifndef LAYERPIPE_ENGINE_SAMPLING_HEAD_H_
#define LAYERPIPE_ENGINE_SAMPLING_HEAD_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/sampling/logit_summary.h"
#include "engine/sampling/logprobs.h"
#include "engine/sampling/sampler.h"

namespace layerpipe {

// What the head needs of a backend (engine/backend/head_ops.h makes one from a LayerBackend). Rows are
// final hidden rows on the host, [m][hidden].
struct HeadOps {
  bool summarizes_on_device = false;
  std::function<absl::Status(const float* rows, absl::Span<const LogitRowRequest> requests,
                             std::vector<LogitRowSummary>* out)>
      summarize;
  std::function<absl::Status(const float* rows, int64_t m, float* logits)> logits;
};

// One row to sample.
struct SampleRow {
  Sampler* sampler;
  absl::Span<const int32_t> history;  // the sequence's ids so far, for the repetition penalty
  const float* hidden;                // its final hidden row
  int top_logprobs = 0;
  bool logprobs = true;  // false: nobody reads the token's log-probability (it is left 0)
};

struct SampledToken {
  int32_t token = 0;
  float logprob = 0;  // log p(token), from the raw (softcapped) logits
  std::vector<IdLogprob> top;
};

// Samples every row, the head running on at most `rows_per_call` rows at a time (a row's result never
// depends on the rows beside it). `out` gets one entry per row, in order.
absl::Status SampleRows(const HeadOps& ops, int64_t hidden_size, int64_t vocab_size,
                        absl::Span<const SampleRow> rows, int64_t rows_per_call, std::vector<SampledToken>* out);

// The token a sampler draws from a whole row of logits, with its log-probability and the best
// `top_logprobs` entries.
SampledToken SampleFromRow(Sampler& sampler, absl::Span<const float> row, absl::Span<const int32_t> history,
                           int top_logprobs, bool logprobs = true);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_SAMPLING_HEAD_H_
