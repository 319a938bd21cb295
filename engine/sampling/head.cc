#include "engine/sampling/head.h"

#include <algorithm>

namespace layerpipe {
namespace {

// The hidden rows of `which` (indices into `rows`) side by side.
void Gather(absl::Span<const SampleRow> rows, const std::vector<size_t>& which, size_t b, int64_t m, int64_t H,
            std::vector<float>* out) {
  out->resize(static_cast<size_t>(m * H));
  for (int64_t j = 0; j < m; ++j) std::copy_n(rows[which[b + j]].hidden, H, out->begin() + j * H);
}

}  // namespace

SampledToken SampleFromRow(Sampler& sampler, absl::Span<const float> row, absl::Span<const int32_t> history,
                           int top_logprobs, bool logprobs) {
  const double lse = logprobs ? LogSumExp(row) : 0.0;
  SampledToken t;
  t.token = sampler.Sample(row, history);
  if (logprobs) t.logprob = static_cast<float>(row[t.token] - lse);
  if (top_logprobs > 0) t.top = TopLogprobs(row, top_logprobs, lse);
  return t;
}

absl::Status SampleRows(const HeadOps& ops, int64_t H, int64_t V, absl::Span<const SampleRow> rows,
                        int64_t rows_per_call, std::vector<SampledToken>* out) {
  out->assign(rows.size(), SampledToken{});
  std::vector<size_t> summarized, whole;
  for (size_t i = 0; i < rows.size(); ++i) {
    (rows[i].sampler->UsesSummary(ops.summarizes_on_device) ? summarized : whole).push_back(i);
  }
  std::vector<float> gathered;
  std::vector<std::vector<int32_t>> penalized;
  std::vector<LogitRowRequest> requests;
  std::vector<LogitRowSummary> summaries;
  for (size_t b = 0; b < summarized.size(); b += rows_per_call) {
    const int64_t m = std::min<int64_t>(rows_per_call, static_cast<int64_t>(summarized.size() - b));
    Gather(rows, summarized, b, m, H, &gathered);
    penalized.assign(static_cast<size_t>(m), {});
    requests.assign(static_cast<size_t>(m), {});
    for (int64_t j = 0; j < m; ++j) {
      const SampleRow& r = rows[summarized[b + j]];
      r.sampler->FillRequest(r.history, &requests[j], &penalized[j], ops.summarizes_on_device);
      requests[j].top_raw = r.top_logprobs;
      if (!r.logprobs) requests[j].log_sum_exp = false;
    }
    if (auto st = ops.summarize(gathered.data(), requests, &summaries); !st.ok()) return st;
    for (int64_t j = 0; j < m; ++j) {
      const size_t i = summarized[b + j];
      const LogitRowSummary& summary = summaries[j];
      SampledToken& t = (*out)[i];
      if (!rows[i].sampler->SampleFromSummary(summary, &t.token)) {
        whole.push_back(i);  // a nucleus wider than the summary: from the whole row, below
        continue;
      }
      if (rows[i].logprobs) t.logprob = static_cast<float>(SummaryRawValue(summary, t.token) - summary.log_sum_exp);
      t.top = TopLogprobs(summary.top_raw, summary.log_sum_exp);
    }
  }
  std::vector<float> logits;
  for (size_t b = 0; b < whole.size(); b += rows_per_call) {
    const int64_t m = std::min<int64_t>(rows_per_call, static_cast<int64_t>(whole.size() - b));
    Gather(rows, whole, b, m, H, &gathered);
    logits.resize(static_cast<size_t>(m * V));
    if (auto st = ops.logits(gathered.data(), m, logits.data()); !st.ok()) return st;
    for (int64_t j = 0; j < m; ++j) {
      const SampleRow& r = rows[whole[b + j]];
      const absl::Span<const float> row(logits.data() + j * V, static_cast<size_t>(V));
      (*out)[whole[b + j]] = SampleFromRow(*r.sampler, row, r.history, r.top_logprobs, r.logprobs);
    }
  }
  return absl::OkStatus();
}

}  // namespace layerpipe
