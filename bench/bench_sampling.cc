// Host cost of picking a token from one row of Gemma's 262,144 logits, for each kind of sampler: the
// whole row (Sampler::Sample), a summary of the row made on the host then the pick (SummarizeLogitRow +
// SampleFromSummary), and the pick alone (a GPU stage's host share: the device makes the summary). A
// CPU stage takes whichever of the first two Sampler::UsesSummary(false) says is cheaper. Logits are
// drawn to look like a language model's: a few strong candidates over a broad, low tail.
//
// Usage: bench_sampling [--reps=N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "engine/sampling/logit_summary.h"
#include "engine/sampling/sampler.h"

ABSL_FLAG(int, reps, 50, "rows timed per sampler (the best of three passes is printed)");

namespace layerpipe {
namespace {

constexpr int kVocab = 262144;

double Seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::vector<std::vector<float>> Rows(int count) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> tail(-4.0f, 2.0f);
  std::uniform_int_distribution<int> id(0, kVocab - 1);
  std::vector<std::vector<float>> rows(count, std::vector<float>(kVocab));
  for (auto& row : rows) {
    for (float& v : row) v = tail(rng);
    for (int i = 0; i < 8; ++i) row[id(rng)] = 8.0f + 2.0f * i;
  }
  return rows;
}

// Best of three passes over `rows`, in ms per row.
template <typename Fn>
double MsPerRow(const std::vector<std::vector<float>>& rows, Fn&& fn) {
  double best = 1e30;
  for (int pass = 0; pass < 3; ++pass) {
    const double t0 = Seconds();
    for (const auto& row : rows) fn(row);
    best = std::min(best, (Seconds() - t0) / rows.size());
  }
  return 1e3 * best;
}

void Bench(const char* name, const SamplingParams& params, const std::vector<std::vector<float>>& rows) {
  const std::vector<int32_t> history = {5, 17, 4242, 99999};
  Sampler whole(params, kVocab), summarised(params, kVocab);
  const double whole_ms = MsPerRow(rows, [&](const std::vector<float>& row) { whole.Sample(row, history); });
  int undecided = 0;
  std::vector<LogitRowSummary> summaries;
  const double summary_ms = MsPerRow(rows, [&](const std::vector<float>& row) {
    std::vector<int32_t> penalized;
    LogitRowRequest request;
    if (!summarised.FillRequest(history, &request, &penalized)) {
      summarised.Sample(row, history);
      return;
    }
    request.log_sum_exp = false;
    const LogitRowSummary summary = SummarizeLogitRow(row, request);
    int32_t token;
    if (!summarised.SampleFromSummary(summary, &token)) {
      ++undecided;
      summarised.Sample(row, history);
    }
    if (summaries.size() < rows.size()) summaries.push_back(summary);
  });
  // The pick alone, on summaries made beforehand (a GPU stage's host share).
  double pick_ms = 0;
  if (summarised.UsesSummary()) {
    size_t next = 0;
    pick_ms = MsPerRow(rows, [&](const std::vector<float>& row) {
      int32_t token;
      if (!summarised.SampleFromSummary(summaries[next++ % summaries.size()], &token)) summarised.Sample(row, history);
    });
  }
  std::printf("%-32s whole row %7.3f ms   host summary + pick %7.3f ms   pick from a summary %7.3f ms%s\n", name,
              whole_ms, summary_ms, pick_ms,
              undecided > 0 ? ("   (" + std::to_string(undecided) + " undecided)").c_str() : "");
}

}  // namespace
}  // namespace layerpipe

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using namespace layerpipe;
  const auto rows = Rows(std::max(1, absl::GetFlag(FLAGS_reps)));
  std::printf("one row of %d logits, penalty over 4 ids where set; ms per token\n", kVocab);
  Bench("greedy", {.temperature = 0}, rows);
  Bench("top-k 40, T 0.8", {.temperature = 0.8f, .top_k = 40, .seed = 1}, rows);
  Bench("T 1.0", {.temperature = 1.0f, .seed = 2}, rows);
  Bench("T 0.7, min-p 0.05, penalty 1.1", {.temperature = 0.7f, .min_p = 0.05f, .repetition_penalty = 1.1f, .seed = 3},
        rows);
  Bench("top-p 0.9, T 0.8", {.temperature = 0.8f, .top_p = 0.9f, .seed = 4}, rows);
  return 0;
}
