// What the last stage needs from a row of logits to pick the next token and report log-probabilities,
// small enough to leave the device that computed the logits: a GPU samples "on the device" by building
// this summary there and copying back a few hundred bytes instead of a 1 MiB row per sequence.
//
// Terms (they match Sampler, engine/sampling/sampler.h):
//   raw row      the softcapped logits, [vocab].
//   prepared row the row Sampler::PrepareLogits makes: NaN and the banned ids set to -inf, then every
//                penalised id's value v replaced by v > 0 ? v / penalty : v * penalty (float arithmetic).
//   better       higher value first, lower id among equal values (a strict total order).
#ifndef LAYERPIPE_ENGINE_SAMPLING_LOGIT_SUMMARY_H_
#define LAYERPIPE_ENGINE_SAMPLING_LOGIT_SUMMARY_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace layerpipe {

// Device summaries return at most this many best entries per row: a larger top_k reads the whole row,
// and a top-p nucleus that reaches past them falls back to it (Sampler::SampleFromSummary).
inline constexpr int kMaxSummaryBest = 1024;

struct LogitRowRequest {
  int best = 0;     // how many best entries of the prepared row, in [0, kMaxSummaryBest]
  int top_raw = 0;  // how many best entries of the raw row (for top log-probabilities)
  float repetition_penalty = 1;
  absl::Span<const int32_t> penalized_ids;  // distinct ids in [0, vocab); ignored when the penalty is 1
  bool log_sum_exp = true;  // false: the caller reports no log-probabilities (the summary's field is 0)
  // A draw over the whole prepared row (temperature sampling without top-k or top-p, optionally with
  // min-p), made where the logits are, for the uniform `u` in [0, 1): LogitRowSummary::drawn.
  bool draw = false;
  double u = 0;
  float temperature = 1;
  float min_p = 0;
  // Top-p's total weight over the whole prepared row at `temperature` (LogitRowSummary::total_mass):
  // with `best` entries, what a top-p sampler without top-k needs to find its nucleus.
  bool total_mass = false;
};

struct ScoredId {
  int32_t id;
  float value;  // in the row the list is drawn from (prepared or raw)
  float raw;    // the raw row's value at id (NaN stays NaN here)
};

struct LogitRowSummary {
  // log Σ exp(raw), as LogSumExp (engine/sampling/logprobs.h) defines it; 0 when not requested.
  double log_sum_exp = 0;
  // The min(best, #entries > -inf) better-most entries of the prepared row, in better order.
  std::vector<ScoredId> best;
  // The min(top_raw, vocab) better-most entries of the raw row with NaN read as -inf (so -inf entries
  // may appear), in better order; value is that reading.
  std::vector<ScoredId> top_raw;
  // When `best` is empty (none asked for, or nothing in the prepared row above -inf), the raw row's
  // argmax ignoring NaN and banned ids, ties to the lower id (0 when there is none): what Sampler falls
  // back to. Otherwise 0 and 0.
  int32_t fallback_id = 0;
  float fallback_raw = 0;
  // With `draw`: the token drawn (DrawFromWholeRow in engine/sampling/sampler.h defines it), -1 when nothing in
  // the prepared row is above -inf; drawn_raw is its raw value.
  int32_t drawn = -1;
  float drawn_raw = 0;
  // With `total_mass`: WholeRowTotalMass (engine/sampling/sampler.h) of the row.
  double total_mass = 0;
};

// The reference: the summary of a host row. Backends without a device summary use it on their host
// logits; device implementations must produce the same ids, values, order and total_mass (log_sum_exp to
// rounding; a draw's running sums may be grouped differently).
LogitRowSummary SummarizeLogitRow(absl::Span<const float> row, const LogitRowRequest& request);

// The "better" order: higher value first, lower id among equal values.
inline bool BetterEntry(const ScoredId& a, const ScoredId& b) {
  return a.value != b.value ? a.value > b.value : a.id < b.id;
}

// The k better-most entries of values[0, n) (NaN read as -inf), in better order; entries equal to -inf
// are left out when skip_neg_inf. `raw` fills ScoredId::raw (values itself when null).
std::vector<ScoredId> BestEntries(const float* values, const float* raw, int64_t n, size_t k, bool skip_neg_inf);

// The raw value at `id` when the summary holds it (a best entry, the drawn token or the fallback), else
// NaN. A token from Sampler::SampleFromSummary always is one of those.
float SummaryRawValue(const LogitRowSummary& summary, int32_t id);

// LogitRowSummary::fallback_id of a host row.
int32_t RawFallbackId(absl::Span<const float> row);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_SAMPLING_LOGIT_SUMMARY_H_
