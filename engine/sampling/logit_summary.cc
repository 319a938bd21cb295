#include "engine/sampling/logit_summary.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

#include "engine/sampling/logprobs.h"
#include "engine/sampling/sampler.h"

namespace layerpipe {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

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
  // Admission is v > threshold once cut, and from the start when -inf entries are left out (NaN and
  // -inf never pass it). Most blocks then hold nothing admissible: one vectorisable test skips them.
  constexpr int64_t kBlock = 16;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    if ((cut || skip_neg_inf) && end - start == kBlock) {
      int above = 0;
      for (int64_t j = 0; j < kBlock; ++j) above |= values[start + j] > threshold ? 1 : 0;
      if (!above) continue;
    }
    for (int64_t i = start; i < end; ++i) {
      const float v = std::isnan(values[i]) ? kNegInf : values[i];
      if ((cut || skip_neg_inf) && !(v > threshold)) continue;
      buffer.push_back({static_cast<int32_t>(i), v, raw != nullptr ? raw[i] : values[i]});
      if (buffer.size() == capacity) {
        std::nth_element(buffer.begin(), buffer.begin() + (k - 1), buffer.end(), BetterEntry);
        buffer.resize(k);
        threshold = buffer[k - 1].value;
        cut = true;
      }
    }
  }
  if (buffer.size() > k) {
    std::nth_element(buffer.begin(), buffer.begin() + (k - 1), buffer.end(), BetterEntry);
    buffer.resize(k);
  }
  std::sort(buffer.begin(), buffer.end(), BetterEntry);
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
  if (id == summary.drawn && id >= 0) return summary.drawn_raw;
  if (id == summary.fallback_id) return summary.fallback_raw;
  return std::numeric_limits<float>::quiet_NaN();
}

LogitRowSummary SummarizeLogitRow(absl::Span<const float> row, const LogitRowRequest& request) {
  LogitRowSummary s;
  const int64_t n = static_cast<int64_t>(row.size());
  // A full pass of double exponentials: the costliest part of a host summary, so only when asked.
  if (request.log_sum_exp) s.log_sum_exp = LogSumExp(row);
  s.top_raw = BestEntries(row.data(), nullptr, n, static_cast<size_t>(std::max(request.top_raw, 0)), false);
  if (request.best > 0) {
    const size_t k = static_cast<size_t>(request.best);
    if (request.repetition_penalty == 1.0f) {
      // The prepared row is the raw one with NaN (which BestEntries skips with -inf) and the banned ids
      // out: the best of the raw row with room for the banned ids, then without them.
      s.best = BestEntries(row.data(), row.data(), n, k + std::size(kBannedTokenIds), true);
      std::erase_if(s.best, [](const ScoredId& e) { return IsBannedTokenId(e.id); });
      if (s.best.size() > k) s.best.resize(k);
    } else {
      std::vector<float> prepared(row.begin(), row.end());
      for (int32_t banned : kBannedTokenIds) {
        if (banned < n) prepared[banned] = kNegInf;
      }
      for (int32_t id : request.penalized_ids) {
        if (id < 0 || id >= n) continue;
        float& v = prepared[id];
        v = v > 0 ? v / request.repetition_penalty : v * request.repetition_penalty;
      }
      s.best = BestEntries(prepared.data(), row.data(), n, k, true);
    }
  }
  if (request.total_mass) s.total_mass = WholeRowTotalMass(row, request);
  if (request.draw) {
    s.drawn = DrawFromWholeRow(row, request);
    if (s.drawn >= 0) s.drawn_raw = row[s.drawn];
  }
  // Only a row without any best entry falls back (Sampler::SampleFromSummary), so only then is the
  // fallback's pass over the row worth making.
  if (s.best.empty()) {
    s.fallback_id = RawFallbackId(row);
    s.fallback_raw = n > 0 ? row[s.fallback_id] : 0.0f;
  }
  return s;
}

}  // namespace layerpipe
