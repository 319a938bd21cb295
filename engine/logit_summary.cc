#include "engine/logit_summary.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/logprobs.h"
#include "engine/sampler.h"

namespace layerpipe {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Better {
  bool operator()(const ScoredId& a, const ScoredId& b) const {
    return a.value != b.value ? a.value > b.value : a.id < b.id;
  }
};

}  // namespace

std::vector<ScoredId> BestEntries(const float* values, const float* raw, int64_t n, size_t k, bool skip_neg_inf) {
  if (k == 0 || n <= 0) return {};
  // A buffer cut back to the k best whenever it fills; the k-th best then admits only strictly better
  // values (ids ascend, so an equal value loses), so most entries cost one comparison.
  const size_t capacity = std::max<size_t>(4 * k, 1024);
  std::vector<ScoredId> buffer;
  buffer.reserve(capacity);
  bool cut = false;
  float threshold = kNegInf;
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::isnan(values[i]) ? kNegInf : values[i];
    if (skip_neg_inf && v == kNegInf) continue;
    if (cut && !(v > threshold)) continue;
    buffer.push_back({static_cast<int32_t>(i), v, raw != nullptr ? raw[i] : values[i]});
    if (buffer.size() == capacity) {
      std::nth_element(buffer.begin(), buffer.begin() + (k - 1), buffer.end(), Better());
      buffer.resize(k);
      threshold = buffer[k - 1].value;
      cut = true;
    }
  }
  if (buffer.size() > k) {
    std::nth_element(buffer.begin(), buffer.begin() + (k - 1), buffer.end(), Better());
    buffer.resize(k);
  }
  std::sort(buffer.begin(), buffer.end(), Better());
  return buffer;
}

int32_t RawFallbackId(absl::Span<const float> row) {
  int32_t best = -1;
  float best_value = 0;
  for (size_t i = 0; i < row.size(); ++i) {
    const float v = row[i];
    if (std::isnan(v) || IsBannedTokenId(static_cast<int32_t>(i))) continue;
    if (best < 0 || v > best_value) {
      best = static_cast<int32_t>(i);
      best_value = v;
    }
  }
  return best < 0 ? 0 : best;
}

float SummaryRawValue(const LogitRowSummary& summary, int32_t id) {
  for (const ScoredId& e : summary.best) {
    if (e.id == id) return e.raw;
  }
  if (id == summary.fallback_id) return summary.fallback_raw;
  return std::numeric_limits<float>::quiet_NaN();
}

LogitRowSummary SummarizeLogitRow(absl::Span<const float> row, const LogitRowRequest& request) {
  LogitRowSummary s;
  const int64_t n = static_cast<int64_t>(row.size());
  s.log_sum_exp = LogSumExp(row);
  s.fallback_id = RawFallbackId(row);
  s.fallback_raw = n > 0 ? row[s.fallback_id] : 0.0f;
  s.top_raw = BestEntries(row.data(), nullptr, n, static_cast<size_t>(std::max(request.top_raw, 0)), false);
  if (request.best > 0) {
    std::vector<float> prepared(row.begin(), row.end());
    for (float& v : prepared) {
      if (std::isnan(v)) v = kNegInf;
    }
    for (int32_t banned : kBannedTokenIds) {
      if (banned < n) prepared[banned] = kNegInf;
    }
    const float penalty = request.repetition_penalty;
    if (penalty != 1.0f) {
      for (int32_t id : request.penalized_ids) {
        if (id < 0 || id >= n) continue;
        float& v = prepared[id];
        v = v > 0 ? v / penalty : v * penalty;
      }
    }
    s.best = BestEntries(prepared.data(), row.data(), n, static_cast<size_t>(request.best), true);
  }
  return s;
}

}  // namespace layerpipe
