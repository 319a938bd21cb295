#include "worker/logprobs.h"

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
  const size_t want = std::min<size_t>(std::max(k, 0), row.size());
  if (want == 0) return {};
  // A sorted buffer of the best `want` so far: one comparison per entry once it is full.
  auto better = [](const IdLogprob& a, const IdLogprob& b) {
    return a.logprob != b.logprob ? a.logprob > b.logprob : a.id < b.id;
  };
  std::vector<IdLogprob> best;  // logprob holds the raw logit until the end
  best.reserve(want + 1);
  for (size_t i = 0; i < row.size(); ++i) {
    const float v = std::isnan(row[i]) ? -std::numeric_limits<float>::infinity() : row[i];
    if (best.size() == want && !(v > best.back().logprob)) continue;  // ids ascend: an equal logit loses
    IdLogprob c{static_cast<int32_t>(i), v};
    best.insert(std::upper_bound(best.begin(), best.end(), c, better), c);
    if (best.size() > want) best.pop_back();
  }
  for (IdLogprob& c : best) c.logprob = static_cast<float>(c.logprob - lse);
  return best;
}

}  // namespace layerpipe
