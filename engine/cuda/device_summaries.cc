#include "engine/cuda/device_summaries.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels.h"
#include "engine/sampling/sampler.h"

namespace layerpipe::cuda {

absl::StatusOr<SummaryCaps> CheckSummaryRequests(absl::Span<const LogitRowRequest> requests, int64_t vocab) {
  const int64_t rows = static_cast<int64_t>(requests.size()), V = vocab;
  SummaryCaps caps;
  for (int64_t r = 0; r < rows; ++r) {
    const LogitRowRequest& q = requests[r];
    if (q.best < 0 || q.best > kMaxSummaryBest || q.top_raw < 0) {
      return absl::InvalidArgumentError(absl::StrCat("logit request ", r, " asks for ", q.best, " best and ",
                                                     q.top_raw, " top entries; best must be in [0, ",
                                                     kMaxSummaryBest, "], top >= 0"));
    }
    if (!(q.repetition_penalty > 0) || !std::isfinite(q.repetition_penalty)) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit request ", r, " has repetition penalty ", q.repetition_penalty));
    }
    if ((q.draw || q.total_mass) && (!(q.temperature > 0) || !std::isfinite(q.temperature) ||
                                     !(q.min_p >= 0 && q.min_p < 1) || !(q.u >= 0 && q.u < 1))) {
      return absl::InvalidArgumentError(absl::StrCat("logit request ", r, " draws with temperature ", q.temperature,
                                                     ", min_p ", q.min_p, " and u ", q.u));
    }
    if (q.repetition_penalty != 1.0f) {
      for (int32_t id : q.penalized_ids) {
        if (id < 0 || id >= V) {
          return absl::InvalidArgumentError(
              absl::StrCat("logit request ", r, " penalises id ", id, " outside the vocabulary [0, ", V, ")"));
        }
      }
      caps.penalized += q.penalized_ids.size();
    }
    caps.best = std::max(caps.best, q.best);
    caps.top = std::max<int>(caps.top, static_cast<int>(std::min<int64_t>(q.top_raw, V)));
  }
  return caps;
}

absl::Status DeviceSummaries::Run(const float* logits, int64_t vocab, absl::Span<const LogitRowRequest> requests,
                                  const SummaryCaps& caps, cudaStream_t stream, std::vector<LogitRowSummary>* out) {
  const int64_t rows = static_cast<int64_t>(requests.size()), V = vocab;
  const int best_cap = caps.best, top_cap = caps.top;
  // One buffer, uploaded part first: [row params][penalised ids] then [stats][best][top].
  auto aligned = [](size_t n) { return (n + 15) / 16 * 16; };
  const size_t params_at = 0;
  const size_t ids_at = aligned(params_at + rows * sizeof(SummaryRowParams));
  const size_t stats_at = aligned(ids_at + caps.penalized * sizeof(int32_t));
  const size_t best_at = aligned(stats_at + rows * sizeof(SummaryRowStats));
  const size_t top_at = aligned(best_at + rows * best_cap * sizeof(SelectedEntry));
  const size_t total = aligned(top_at + rows * top_cap * sizeof(SelectedEntry));
  bool moved = false;
  LP_RETURN_IF_ERROR(summary_.EnsureAtLeast(total, &moved));
  LP_RETURN_IF_ERROR(summary_host_.EnsureAtLeast(total));
  LP_RETURN_IF_ERROR(prepared_.EnsureAtLeast(rows * V * sizeof(float), &moved));
  uint8_t* host = summary_host_.get();
  auto* row_params = reinterpret_cast<SummaryRowParams*>(host + params_at);
  auto* ids = reinterpret_cast<int32_t*>(host + ids_at);
  int32_t next = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const LogitRowRequest& q = requests[r];
    SummaryRowParams& rp = row_params[r];
    rp.best = q.best;
    rp.top_raw = static_cast<int32_t>(std::min<int64_t>(q.top_raw, V));
    rp.penalty = q.repetition_penalty;
    rp.log_sum_exp = q.log_sum_exp ? 1 : 0;
    rp.draw = q.draw ? 1 : 0;
    rp.total_mass = q.total_mass ? 1 : 0;
    rp.u = q.u;
    rp.inv_temperature = q.draw || q.total_mass ? 1.0f / q.temperature : 0.0f;
    rp.min_p = q.min_p;
    rp.penalized_begin = next;
    if (q.repetition_penalty != 1.0f) {
      std::memcpy(ids + next, q.penalized_ids.data(), q.penalized_ids.size() * sizeof(int32_t));
      next += static_cast<int32_t>(q.penalized_ids.size());
    }
    rp.penalized_end = next;
  }
  uint8_t* dev = summary_.as<uint8_t>();
  SummarizeParams p{};
  p.raw = logits;
  p.prepared = prepared_.as<float>();
  p.rows = rows;
  p.vocab = V;
  p.row_params = reinterpret_cast<const SummaryRowParams*>(dev + params_at);
  p.penalized = reinterpret_cast<const int32_t*>(dev + ids_at);
  static_assert(std::size(kBannedTokenIds) <= std::size(SummarizeParams{}.banned));
  for (int32_t id : kBannedTokenIds) p.banned[p.num_banned++] = id;
  p.stats = reinterpret_cast<SummaryRowStats*>(dev + stats_at);
  p.best = reinterpret_cast<SelectedEntry*>(dev + best_at);
  p.top = reinterpret_cast<SelectedEntry*>(dev + top_at);
  p.best_capacity = best_cap;
  p.top_capacity = top_cap;
  absl::Status run = CudaStatus(cudaMemcpyAsync(dev, host, stats_at, cudaMemcpyHostToDevice, stream), "upload");
  if (run.ok()) run = CudaStatus(LaunchSummarize(p, stream), "summary kernels");
  if (run.ok()) {
    run = CudaStatus(cudaMemcpyAsync(host + stats_at, dev + stats_at, total - stats_at, cudaMemcpyDeviceToHost, stream),
                     "download");
  }
  // Drained on every path: the next call rewrites the pinned buffer an upload may still be reading.
  const absl::Status synced = CudaStatus(cudaStreamSynchronize(stream), "summary");
  LP_RETURN_IF_ERROR(run);
  LP_RETURN_IF_ERROR(synced);

  // The kernels leave each selection unordered; the order is the summary's "better" order.
  auto entries = [](const SelectedEntry* e, int32_t n) {
    std::vector<ScoredId> v;
    v.reserve(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) v.push_back({e[i].id, e[i].value, e[i].raw});
    std::sort(v.begin(), v.end(), BetterEntry);
    return v;
  };
  const auto* stats = reinterpret_cast<const SummaryRowStats*>(host + stats_at);
  const auto* best = reinterpret_cast<const SelectedEntry*>(host + best_at);
  const auto* top = reinterpret_cast<const SelectedEntry*>(host + top_at);
  out->resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    LogitRowSummary& s = (*out)[r];
    s.log_sum_exp = stats[r].log_sum_exp;
    s.fallback_id = stats[r].fallback_id;
    s.fallback_raw = stats[r].fallback_raw;
    s.best = entries(best + r * best_cap, stats[r].best_count);
    s.top_raw = entries(top + r * top_cap, stats[r].top_count);
    if (requests[r].draw) {
      s.drawn = stats[r].drawn;
      s.drawn_raw = stats[r].drawn_raw;
    }
    if (requests[r].total_mass) s.total_mass = stats[r].total_mass;
    if (!s.best.empty()) {  // the fallback is only part of a summary without best entries
      s.fallback_id = 0;
      s.fallback_raw = 0;
    }
  }
  return absl::OkStatus();
}

}  // namespace layerpipe::cuda
