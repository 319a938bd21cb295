// Next-token selection from a row of logits: repetition penalty, greedy or temperature sampling
// with top-k / top-p / min-p filtering, drawn from a seeded RNG whose output is the same on every
// platform.
#ifndef LAYERPIPE_ENGINE_SAMPLING_SAMPLER_H_
#define LAYERPIPE_ENGINE_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/sampling/logit_summary.h"

namespace layerpipe {

struct SamplingParams {
  float temperature = 0;         // 0 selects greedy decoding.
  int top_k = 0;                 // 0 disables.
  float top_p = 1;               // 1 disables.
  float min_p = 0;               // 0 disables; relative to the most likely token's probability.
  float repetition_penalty = 1;  // 1 disables.
  uint64_t seed = 0;
};

// The ids of the end-of-image and end-of-audio markers. They only ever close a media span the
// engine writes itself, so the model must never be allowed to produce them.
inline constexpr int32_t kBannedTokenIds[] = {258882, 258883};
inline bool IsBannedTokenId(int32_t id) {
  for (int32_t banned : kBannedTokenIds) {
    if (id == banned) return true;
  }
  return false;
}

// InvalidArgument naming the offending field and value, for a request to be rejected before it
// reaches a Sampler.
absl::Status ValidateSamplingParams(const SamplingParams& params);

// The token a whole-row draw picks (temperature > 0 without top-k or top-p, as Sampler samples): the row
// prepared as `request` says (NaN and banned ids out, the repetition penalty on its penalized_ids), then
// weights e^((logit - max) / temperature) (0 below e^-80), those below min_p dropped, and the one whose
// cumulative weight in id order first exceeds u times the total. -1 when nothing is above -inf.
int32_t DrawFromWholeRow(absl::Span<const float> row, const LogitRowRequest& request);

// Top-p's total over a whole row (temperature > 0, no top-k), summed as Sampler sums it: the weights of
// DrawFromWholeRow (before min-p) over the row prepared as `request` says. 0 when nothing is above -inf.
double WholeRowTotalMass(absl::Span<const float> row, const LogitRowRequest& request);

struct TokenProbability {
  int32_t id;
  double probability;
};

// One Sampler per generated sequence: it owns that sequence's RNG stream, so the same seed and the
// same sequence of logits yield the same tokens regardless of what else runs in the batch.
//
// Sample() pipeline:
//   1. Only the first min(logits.size(), vocab_size) entries take part (a padded row is fine).
//      NaN counts as -inf; the banned ids above are removed.
//   2. Repetition penalty (HF semantics) over every distinct id in `history` (prompt + generated):
//      a positive logit is divided by the penalty, a negative one multiplied.
//   3. temperature == 0: argmax, ties broken towards the lowest id. Otherwise:
//      weights e^((logit - max) / T), i.e. probabilities relative to the best token; tokens below
//      e^-80 of the best are dropped (they could not affect the 53-bit draw). Then top-k; top-p
//      keeps the smallest prefix, in (logit descending, id ascending) order, whose mass reaches
//      top_p of the top-k survivors' mass (never empty); min-p drops tokens whose weight is below
//      min_p; then one draw. That order is total, so the kept set and the draw never depend on
//      how a standard library implements nth_element or sort.
//   4. If nothing finite is left (everything NaN, -inf or banned), the result is the argmax of the
//      raw input ignoring NaN and banned ids (ties to the lowest id); if the raw input has no such
//      value either, id 0. An empty row returns 0.
// The sampling path consumes exactly one 64-bit RNG output per call (greedy consumes none), so the
// RNG position depends only on the number of sampled steps. The uniform is the top 53 bits of
// std::mt19937_64, whose output the C++ standard fixes bit for bit; no <random> distribution is used.
//
// Cost over Gemma's 262,144 ids (one core): greedy ~0.05 ms; top-k 64 + top-p ~0.2 ms; without
// top-k a full-vocabulary pass with a vectorised exp, ~1-2 ms. Top-p without top-k sorts only the
// quarter-nat band of probabilities where the nucleus ends, never the whole vocabulary.
//
// Params are expected to pass ValidateSamplingParams; a field that does not is treated as disabled
// (an invalid temperature as greedy) rather than crashing the engine.
class Sampler {
 public:
  Sampler(const SamplingParams& params, int vocab_size);

  int32_t Sample(absl::Span<const float> logits, absl::Span<const int32_t> history);

  // The distribution Sample() would draw from for these inputs, after every filter: ids best first
  // with probabilities summing to 1 (a single id with probability 1 when greedy). Consumes no
  // randomness; meant for reporting log-probabilities and for checking the filters exactly.
  std::vector<TokenProbability> Distribution(absl::Span<const float> logits,
                                             absl::Span<const int32_t> history);

  // ---- Sampling from a LogitRowSummary (engine/sampling/logit_summary.h), e.g. one a GPU computed.
  // How many best prepared entries SampleFromSummary needs: 1 when greedy, top_k when top-k applies
  // and top_k <= max_best; 0 when this sampler needs the whole row (plain temperature, top-p or min-p
  // without top-k, or a top_k above max_best).
  int BestNeeded(int max_best) const;
  // Whether SampleFromSummary serves this sampler for a backend that summarises on its device
  // (`on_device`) or on the host: greedy and top-k (BestNeeded(kMaxSummaryBest) > 0) always, as a host
  // summary is cheaper than Sample's pass too; on a device also a whole-row draw (temperature without
  // top-k or top-p, for this sampler's next uniform) and top-p without top-k (from the best
  // kMaxSummaryBest entries and the row's total weight; a summary that may not decide, see
  // SampleFromSummary). On the host those two cost more than Sample itself (bench_sampling).
  bool UsesSummary(bool on_device = true) const;
  // Fills `request` for the next SampleFromSummary (false, leaving it, when UsesSummary(on_device) is
  // false); `penalized` keeps the ids request->penalized_ids points at. Draws nothing: a whole-row draw
  // gets the uniform the stream will give next, and the stream moves on only in SampleFromSummary.
  bool FillRequest(absl::Span<const int32_t> history, LogitRowRequest* request, std::vector<int32_t>* penalized,
                   bool on_device = true);
  // The distinct ids of `history` in [0, vocab) that the repetition penalty touches; empty when the
  // penalty is off. What a LogitRowRequest's penalized_ids must hold.
  std::vector<int32_t> PenalizedIds(absl::Span<const int32_t> history);
  // The token Sample() would return for the summarised row and history into *token, advancing the RNG
  // exactly as it would; the summary must answer the request FillRequest made (for BestNeeded() > 0,
  // `best` holds that many better-most prepared entries, fewer only when the row has no more above
  // -inf). False, with nothing drawn, when top-p's nucleus reaches past the summary's best entries:
  // then only the whole row (Sample) can say.
  bool SampleFromSummary(const LogitRowSummary& summary, int32_t* token);

  // Advances the RNG as if `draws` sampled steps had run (each takes one output; see above), so a
  // sequence rebuilt elsewhere resumes the same stream. Greedy never draws, so it is unaffected.
  void Discard(int64_t draws);

  const SamplingParams& params() const { return params_; }

 private:
  struct Candidate {
    float logit;
    int32_t id;
    double weight;  // probability relative to the best candidate
  };

  // Copies the usable logits into work_, with NaN and banned ids set to -inf and the penalty
  // applied.
  void PrepareLogits(absl::Span<const float> logits, absl::Span<const int32_t> history, int n);
  int32_t Greedy(int n) const;  // -1 when no entry of work_ is finite
  float MaxLogit(int n) const;
  // Fills candidates_ with the survivors of top-k / min-p / top-p and their relative weights;
  // returns how many there are (0 when no logit is finite).
  size_t Filter(int n);
  // The top-k branch of Filter once candidates_ holds the top-k survivors, best first.
  size_t FilterSortedTopK(float max_logit);
  // Top-p's last step: boundary_ best first, appended to candidates_ until the mass, starting from
  // mass_above, reaches target.
  void AppendBoundaryBand(double mass_above, double target);
  // The candidate that the uniform draw u lands on, weighted by their weights.
  int32_t Draw(double u, size_t size) const;
  // Leaves the k best finite entries of work_ in candidates_, best first (logit descending, id
  // ascending).
  void SelectTopK(int n, size_t k);
  int32_t SampleFromWork(int n);
  double NextUniform();  // [0, 1) with 53 random bits.
  double PeekUniform() const;  // what NextUniform() will return, without advancing
  bool WholeRowDraw() const;   // temperature sampling over the whole row (no top-k, no top-p)
  bool Nucleus() const;        // top-p over the whole row (no top-k)
  bool NucleusFromSummary(const LogitRowSummary& summary, int32_t* token);

  SamplingParams params_;
  int vocab_size_;
  std::mt19937_64 rng_;
  // Reused across calls so a 262,144-entry vocabulary does not allocate per token.
  std::vector<float> work_;
  std::vector<uint8_t> penalized_;
  std::vector<Candidate> candidates_;
  std::vector<float> row_weights_;
  std::vector<uint16_t> row_buckets_;
  std::vector<Candidate> boundary_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_SAMPLING_SAMPLER_H_
