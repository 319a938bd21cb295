#include "engine/sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>


namespace layerpipe {

double LogSumExp(absl::Span<const float> row) {
  float max = -std::numeric_limits<float>::infinity();
  for (float v : row) {
    if (v > max) max = v;  // false for NaN
  }
  if (!std::isfinite(max)) return max;  // all -inf/NaN, or +inf present
  double sum = 0;
  for (float v : row) {
    if (v > -std::numeric_limits<float>::infinity()) sum += std::exp(static_cast<double>(v) - max);
  }
  return max + std::log(sum);
}

std::vector<IdLogprob> TopLogprobs(absl::Span<const float> row, int k, double lse) {
  return TopLogprobs(BestEntries(row.data(), nullptr, static_cast<int64_t>(row.size()),
                                 static_cast<size_t>(std::max(k, 0)), /*skip_neg_inf=*/false),
                     lse);
}

std::vector<IdLogprob> TopLogprobs(absl::Span<const ScoredId> best, double lse) {
  std::vector<IdLogprob> out;
  out.reserve(best.size());
  for (const ScoredId& e : best) out.push_back({e.id, static_cast<float>(e.value - lse)});
  return out;
}

}  // namespace layerpipe
