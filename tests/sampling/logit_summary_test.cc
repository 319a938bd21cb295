// Logit-row summaries (engine/sampling/logit_summary.h): the reference summary against a brute-force one, and
// sampling from a summary against sampling from the whole row — same token, same RNG stream, for every
// kind of sampler that may use one. A device summary is checked against this reference in
// tests/gpu/cuda_backend_test.cc.
#include "engine/sampling/logit_summary.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "engine/engine.h"
#include "engine/sampling/logprobs.h"
#include "engine/sampling/sampler.h"
#include "gtest/gtest.h"
#include "tests/engine/test_util.h"

namespace layerpipe {
namespace {

constexpr int kGemmaVocab = 262144;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Rows with the awkward cases: coarse values (many exact ties), NaN, ±inf, and the banned ids holding
// the largest value when the vocabulary reaches them.
std::vector<float> AwkwardRow(std::mt19937_64& rng, int vocab, int kind) {
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  std::vector<float> row(vocab);
  for (float& v : row) v = normal(rng);
  if (kind % 2 == 1) {
    for (float& v : row) v = std::round(v * 2) / 2;  // ties everywhere
  }
  if (kind % 3 == 1) {
    for (int i = 0; i < vocab / 50; ++i) row[pick(rng)] = kNaN;
    for (int i = 0; i < vocab / 50; ++i) row[pick(rng)] = -kInf;
  }
  if (kind % 5 == 2) row[pick(rng)] = kInf;
  for (int32_t banned : kBannedTokenIds) {
    if (banned < vocab) row[banned] = 100.0f;
  }
  return row;
}

// The k better-most of a row by sorting everything.
std::vector<ScoredId> BruteBest(const std::vector<float>& values, const std::vector<float>& raw, size_t k,
                                bool skip_neg_inf) {
  std::vector<ScoredId> all;
  for (size_t i = 0; i < values.size(); ++i) {
    const float v = std::isnan(values[i]) ? -kInf : values[i];
    if (skip_neg_inf && v == -kInf) continue;
    all.push_back({static_cast<int32_t>(i), v, raw[i]});
  }
  std::sort(all.begin(), all.end(), [](const ScoredId& a, const ScoredId& b) {
    return a.value != b.value ? a.value > b.value : a.id < b.id;
  });
  if (all.size() > k) all.resize(k);
  return all;
}

void ExpectSameEntries(const std::vector<ScoredId>& got, const std::vector<ScoredId>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].id, want[i].id) << "entry " << i;
    EXPECT_EQ(got[i].value, want[i].value) << "entry " << i;
    EXPECT_EQ(std::isnan(got[i].raw), std::isnan(want[i].raw)) << "entry " << i;
    if (!std::isnan(want[i].raw)) EXPECT_EQ(got[i].raw, want[i].raw) << "entry " << i;
  }
}

TEST(LogitSummary, MatchesBruteForce) {
  std::mt19937_64 rng(3);
  for (int vocab : {7, 1000, kGemmaVocab}) {
    for (int kind = 0; kind < 8; ++kind) {
      const std::vector<float> row = AwkwardRow(rng, vocab, kind);
      std::vector<int32_t> penalized;
      for (int i = 0; i < vocab; i += 3) penalized.push_back(i);
      for (int best : {1, 5, 1024}) {
        LogitRowRequest req;
        req.best = best;
        req.top_raw = 20;
        req.repetition_penalty = kind % 2 ? 1.3f : 1.0f;
        req.penalized_ids = penalized;
        const LogitRowSummary s = SummarizeLogitRow(row, req);

        std::vector<float> prepared = row;
        for (float& v : prepared) v = std::isnan(v) ? -kInf : v;
        for (int32_t banned : kBannedTokenIds) {
          if (banned < vocab) prepared[banned] = -kInf;
        }
        if (req.repetition_penalty != 1.0f) {
          for (int32_t id : penalized) prepared[id] = prepared[id] > 0 ? prepared[id] / 1.3f : prepared[id] * 1.3f;
        }
        SCOPED_TRACE(::testing::Message() << "vocab " << vocab << " kind " << kind << " best " << best);
        ExpectSameEntries(s.best, BruteBest(prepared, row, best, true));
        ExpectSameEntries(s.top_raw, BruteBest(row, row, 20, false));
        EXPECT_EQ(s.log_sum_exp, LogSumExp(row));
        // The fallback is only filled in where a sampler would use it.
        EXPECT_EQ(s.fallback_id, s.best.empty() ? RawFallbackId(row) : 0);
      }
    }
  }
}

TEST(LogitSummary, FallbackSkipsNaNAndBannedIdsAndKeepsNegativeInfinity) {
  std::vector<float> row(kGemmaVocab, kNaN);
  row[kBannedTokenIds[0]] = 5.0f;
  EXPECT_EQ(RawFallbackId(row), 0);  // nothing usable at all
  row[17] = -kInf;
  row[9] = -kInf;
  EXPECT_EQ(RawFallbackId(row), 9);
  row[30] = -2.0f;
  EXPECT_EQ(RawFallbackId(row), 30);
  const LogitRowSummary s = SummarizeLogitRow(row, {.best = 3});
  ASSERT_EQ(s.best.size(), 1u);  // the banned id's 5 is no candidate, -inf entries neither
  EXPECT_EQ(s.best[0].id, 30);
}

TEST(LogitSummary, TheFallbackComesWithAnEmptyBestList) {
  std::vector<float> row(kGemmaVocab, -kInf);
  row[kBannedTokenIds[0]] = 9.0f;
  row[3] = kNaN;
  row[4] = -kInf;
  for (int best : {0, 4}) {
    const LogitRowSummary s = SummarizeLogitRow(row, {.best = best});
    EXPECT_TRUE(s.best.empty());
    EXPECT_EQ(s.fallback_id, 0);  // -inf at 0 is the first non-NaN, non-banned maximum
    EXPECT_EQ(s.fallback_raw, -kInf);
  }
  row[7] = 1.0f;
  EXPECT_EQ(SummarizeLogitRow(row, {.best = 0}).fallback_id, 7);
  EXPECT_EQ(SummarizeLogitRow(row, {.best = 1}).fallback_id, 0);  // best holds 7 itself
}

TEST(LogitSummary, LogSumExpOnlyWhenAsked) {
  std::mt19937_64 rng(9);
  const std::vector<float> row = AwkwardRow(rng, 1000, 0);
  LogitRowRequest with{.best = 3, .top_raw = 2}, without = with;
  without.log_sum_exp = false;
  const LogitRowSummary a = SummarizeLogitRow(row, with), b = SummarizeLogitRow(row, without);
  EXPECT_EQ(a.log_sum_exp, LogSumExp(row));
  EXPECT_EQ(b.log_sum_exp, 0.0);
  ExpectSameEntries(b.best, a.best);
  ExpectSameEntries(b.top_raw, a.top_raw);
  EXPECT_EQ(b.fallback_id, a.fallback_id);
}

TEST(LogitSummary, SummaryRawValueFindsBestEntriesAndTheFallback) {
  LogitRowSummary s;
  s.best = {{4, 2.0f, 3.0f}, {1, 1.0f, 1.5f}};
  s.fallback_id = 9;
  s.fallback_raw = -1.0f;
  EXPECT_EQ(SummaryRawValue(s, 1), 1.5f);
  EXPECT_EQ(SummaryRawValue(s, 9), -1.0f);
  EXPECT_TRUE(std::isnan(SummaryRawValue(s, 2)));
}

TEST(SamplerSummary, BestNeededSaysWhichSamplersCanUseASummary) {
  const int V = 1000;
  EXPECT_EQ(Sampler({.temperature = 0}, V).BestNeeded(kMaxSummaryBest), 1);
  EXPECT_EQ(Sampler({.temperature = 0.8f, .top_k = 40}, V).BestNeeded(kMaxSummaryBest), 40);
  EXPECT_EQ(Sampler({.temperature = 0.8f, .top_k = 40, .top_p = 0.9f}, V).BestNeeded(kMaxSummaryBest), 40);
  EXPECT_EQ(Sampler({.temperature = 0.8f}, V).BestNeeded(kMaxSummaryBest), 0);
  EXPECT_TRUE(Sampler({.temperature = 0.8f}, V).UsesSummary());  // a whole-row draw
  EXPECT_TRUE(Sampler({.temperature = 0.8f, .min_p = 0.1f}, V).UsesSummary());
  EXPECT_TRUE(Sampler({.temperature = 0.8f, .top_p = 0.9f}, V).UsesSummary());  // a nucleus
  EXPECT_FALSE(Sampler({.temperature = 0.8f, .top_k = kMaxSummaryBest + 1}, 5000).UsesSummary());
  EXPECT_EQ(Sampler({.temperature = 0.8f, .top_p = 0.9f}, V).BestNeeded(kMaxSummaryBest), 0);
  EXPECT_EQ(Sampler({.temperature = 0.8f, .top_k = 40}, V).BestNeeded(39), 0);
  EXPECT_EQ(Sampler({.temperature = 0.8f, .top_k = V}, V).BestNeeded(2 * V), 0);  // top-k off
}

TEST(SamplerSummary, PenalizedIdsAreTheDistinctIdsInTheVocabulary) {
  Sampler off({.repetition_penalty = 1.0f}, 10);
  EXPECT_TRUE(off.PenalizedIds({1, 2, 3}).empty());
  Sampler on({.repetition_penalty = 1.2f}, 10);
  std::vector<int32_t> ids = on.PenalizedIds({3, 1, 3, -1, 12, 1, 9});
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 9}));
  // Calls do not leak state into each other.
  EXPECT_EQ(on.PenalizedIds({3}), (std::vector<int32_t>{3}));
}

// What the last stage does: the summary's token, or the whole row's when the summary cannot say (a
// nucleus wider than it), counted in *undecided.
int32_t PickLikeAStage(Sampler& s, const LogitRowSummary& summary, absl::Span<const float> row,
                       absl::Span<const int32_t> history, int* undecided = nullptr) {
  int32_t token = -1;
  if (s.SampleFromSummary(summary, &token)) return token;
  if (undecided != nullptr) ++*undecided;
  return s.Sample(row, history);
}

// Two samplers with one seed: one sees whole rows, the other only summaries. Every token must agree,
// which also shows both consume the RNG stream identically.
void ExpectSameTokens(const SamplingParams& params, int vocab, int steps, uint64_t row_seed,
                      int* undecided = nullptr) {
  Sampler whole(params, vocab), summarised(params, vocab);
  ASSERT_TRUE(summarised.UsesSummary());
  std::mt19937_64 rng(row_seed);
  std::vector<int32_t> history;
  std::uniform_int_distribution<int32_t> id(0, vocab - 1);
  for (int i = 0; i < 40; ++i) history.push_back(id(rng));
  for (int step = 0; step < steps; ++step) {
    const std::vector<float> row = AwkwardRow(rng, vocab, step);
    std::vector<int32_t> penalized;
    LogitRowRequest req;
    ASSERT_TRUE(summarised.FillRequest(history, &req, &penalized));
    const int32_t want = whole.Sample(row, history);
    const int32_t got = PickLikeAStage(summarised, SummarizeLogitRow(row, req), row, history, undecided);
    ASSERT_EQ(got, want) << "step " << step;
    history.push_back(want);
  }
}

TEST(SamplerSummary, SameTokensAsTheWholeRow) {
  const int V = 2000;
  for (float penalty : {1.0f, 1.3f, 0.7f}) {
    SCOPED_TRACE(::testing::Message() << "penalty " << penalty);
    ExpectSameTokens({.temperature = 0, .repetition_penalty = penalty}, V, 30, 1);
    for (int top_k : {1, 3, 40, kMaxSummaryBest}) {
      for (float top_p : {1.0f, 0.9f, 0.3f}) {
        for (float min_p : {0.0f, 0.05f}) {
          SCOPED_TRACE(::testing::Message() << "top_k " << top_k << " top_p " << top_p << " min_p " << min_p);
          ExpectSameTokens({.temperature = 0.7f, .top_k = top_k, .top_p = top_p, .min_p = min_p,
                            .repetition_penalty = penalty, .seed = 99},
                           V, 30, 2);
        }
      }
    }
  }
}

TEST(SamplerSummary, WholeRowDrawsGiveTheSameTokensAsTheWholeRow) {
  const int V = 2000;
  for (float penalty : {1.0f, 1.3f}) {
    for (float temperature : {0.3f, 1.0f, 2.5f}) {
      for (float min_p : {0.0f, 0.05f}) {
        SCOPED_TRACE(::testing::Message() << "penalty " << penalty << " temperature " << temperature << " min_p "
                                          << min_p);
        ExpectSameTokens({.temperature = temperature, .min_p = min_p, .repetition_penalty = penalty, .seed = 17}, V,
                         30, 3);
      }
    }
  }
  // A top_k that covers the vocabulary is no top-k.
  ExpectSameTokens({.temperature = 0.8f, .top_k = V, .seed = 5}, V, 20, 4);
}

TEST(SamplerSummary, NucleiFromSummariesGiveTheSameTokensAsTheWholeRow) {
  // 2000 ids and summaries of the best 1024: a peaked distribution's nucleus lies inside the summary, a
  // flat one's reaches past it, and then the whole row decides (without drawing twice).
  int peaked_undecided = 0, flat_undecided = 0;
  for (float top_p : {0.5f, 0.9f, 0.99f}) {
    for (float min_p : {0.0f, 0.02f}) {
      SCOPED_TRACE(::testing::Message() << "top_p " << top_p << " min_p " << min_p);
      ExpectSameTokens({.temperature = 0.3f, .top_p = top_p, .min_p = min_p, .repetition_penalty = 1.2f, .seed = 3},
                       2000, 30, 8, &peaked_undecided);
      ExpectSameTokens({.temperature = 20.0f, .top_p = top_p, .min_p = min_p, .seed = 4}, 2000, 10, 9,
                       &flat_undecided);
    }
  }
  EXPECT_EQ(peaked_undecided, 0);
  EXPECT_GT(flat_undecided, 0);
  // With fewer ids than a summary holds, every nucleus is inside it.
  int small_undecided = 0;
  ExpectSameTokens({.temperature = 2.0f, .top_p = 0.95f, .seed = 5}, 700, 30, 10, &small_undecided);
  EXPECT_EQ(small_undecided, 0);
  ExpectSameTokens({.temperature = 1.0f, .top_p = 0.9f, .seed = 6}, kGemmaVocab, 6, 11);
}

TEST(SamplerSummary, TopPTotalDoesNotDependOnTheOrderOfTheRow) {
  // Each quarter-nat bucket's sum is exact, so the total is the same however a row's entries are summed:
  // what lets the CUDA draw kernel build its histogram with atomic adds in any order. Permuting a row
  // permutes the order in which the host adds them (and which of its interleaved histograms each lands in).
  std::mt19937_64 rng(31);
  const int V = 100003;  // below the banned ids, and not a multiple of 4
  for (int kind = 0; kind < 6; ++kind) {
    std::vector<float> row = AwkwardRow(rng, V, kind);
    for (float temperature : {0.05f, 1.0f, 40.0f}) {
      LogitRowRequest req{.total_mass = true};
      req.temperature = temperature;
      const double total = WholeRowTotalMass(row, req);
      std::vector<float> shuffled = row;
      for (int rep = 0; rep < 3; ++rep) {
        std::shuffle(shuffled.begin(), shuffled.end(), rng);
        EXPECT_EQ(WholeRowTotalMass(shuffled, req), total) << "kind " << kind << " temperature " << temperature;
      }
      std::reverse(shuffled.begin(), shuffled.end());
      EXPECT_EQ(WholeRowTotalMass(shuffled, req), total) << "kind " << kind << " temperature " << temperature;
    }
  }
}

TEST(SamplerSummary, ANucleusInsideAPlateauCutBySummaryIsLeftToTheWholeRow) {
  // 1500 ids share the best logit, more than a summary's 1024 best entries, and hold almost all the mass:
  // the best bucket is incomplete, so a nucleus ending in it cannot be replayed. The sampler says so
  // without drawing, and the whole row decides.
  const int V = 5000;
  std::vector<float> row(V, -3.0f);
  for (int i = 0; i < 1500; ++i) row[(i * 7) % V] = 5.0f;
  for (float top_p : {0.3f, 0.99f}) {
    const SamplingParams params{.temperature = 1.0f, .top_p = top_p, .seed = 12};
    Sampler whole(params, V), summarised(params, V);
    for (int step = 0; step < 5; ++step) {
      std::vector<int32_t> penalized;
      LogitRowRequest req;
      ASSERT_TRUE(summarised.FillRequest({}, &req, &penalized));
      const LogitRowSummary s = SummarizeLogitRow(row, req);
      ASSERT_EQ(s.best.size(), static_cast<size_t>(kMaxSummaryBest));
      int32_t token = -1;
      EXPECT_FALSE(summarised.SampleFromSummary(s, &token)) << "top_p " << top_p;
      // Nothing was drawn: the whole row gives the token the whole-row sampler gives, step after step.
      EXPECT_EQ(summarised.Sample(row, {}), whole.Sample(row, {})) << "top_p " << top_p << " step " << step;
    }
  }
  // A plateau that fits, with the cut in a lower band: a nucleus inside the plateau is decided.
  std::vector<float> fits(V, -3.0f);
  for (int i = 0; i < 1000; ++i) fits[(i * 7) % V] = 5.0f;
  const SamplingParams params{.temperature = 1.0f, .top_p = 0.9f, .seed = 13};
  Sampler whole(params, V), summarised(params, V);
  for (int step = 0; step < 5; ++step) {
    std::vector<int32_t> penalized;
    LogitRowRequest req;
    ASSERT_TRUE(summarised.FillRequest({}, &req, &penalized));
    int32_t token = -1;
    ASSERT_TRUE(summarised.SampleFromSummary(SummarizeLogitRow(fits, req), &token));
    EXPECT_EQ(token, whole.Sample(fits, {})) << "step " << step;
  }
}

TEST(SamplerSummary, FillRequestPeeksAtTheStreamAndSamplingAdvancesIt) {
  Sampler s({.temperature = 1.0f, .seed = 42}, 100);
  std::vector<int32_t> penalized;
  LogitRowRequest a, b, c;
  ASSERT_TRUE(s.FillRequest({}, &a, &penalized));
  ASSERT_TRUE(s.FillRequest({}, &b, &penalized));
  EXPECT_TRUE(a.draw);
  EXPECT_EQ(a.u, b.u);  // peeking twice draws nothing
  std::vector<float> row(100, 0.0f);
  int32_t token;
  EXPECT_TRUE(s.SampleFromSummary(SummarizeLogitRow(row, a), &token));
  ASSERT_TRUE(s.FillRequest({}, &c, &penalized));
  EXPECT_NE(c.u, a.u);
  // Samplers a summary cannot serve say so and fill nothing.
  Sampler wide_top_k({.temperature = 1.0f, .top_k = kMaxSummaryBest + 1}, 5000);
  LogitRowRequest untouched;
  EXPECT_FALSE(wide_top_k.UsesSummary());
  EXPECT_FALSE(wide_top_k.FillRequest({}, &untouched, &penalized));
  EXPECT_FALSE(untouched.draw);
  EXPECT_EQ(untouched.best, 0);
}

TEST(SamplerSummary, SameTokensOverTheGemmaVocabularyWithBannedIds) {
  ExpectSameTokens({.temperature = 0}, kGemmaVocab, 8, 5);
  ExpectSameTokens({.temperature = 1.2f, .top_k = 64, .top_p = 0.95f, .repetition_penalty = 1.1f, .seed = 4},
                   kGemmaVocab, 8, 6);
  ExpectSameTokens({.temperature = 0.9f, .min_p = 0.02f, .seed = 8}, kGemmaVocab, 8, 7);
}

TEST(SamplerSummary, NothingAboveNegativeInfinityFallsBackLikeTheWholeRow) {
  const int V = kGemmaVocab;
  std::vector<float> row(V, -kInf);
  row[kBannedTokenIds[1]] = 3.0f;
  row[5] = kNaN;
  for (const SamplingParams& p : {SamplingParams{.temperature = 0}, SamplingParams{.temperature = 1, .top_k = 8},
                                  SamplingParams{.temperature = 1}}) {
    Sampler whole(p, V), summarised(p, V);
    std::vector<int32_t> penalized;
    LogitRowRequest req;
    ASSERT_TRUE(summarised.FillRequest({}, &req, &penalized));
    const LogitRowSummary s = SummarizeLogitRow(row, req);
    EXPECT_TRUE(s.best.empty());
    int32_t got = -1;
    ASSERT_TRUE(summarised.SampleFromSummary(s, &got));
    EXPECT_EQ(got, whole.Sample(row, {}));
    EXPECT_EQ(got, 0);
    // The next sampled steps still agree: both consumed one draw (or none when greedy).
    const std::vector<float> next = {0.1f, 0.5f, 0.2f, 0.4f, 0.3f, 0.0f, 0.2f, 0.1f, 0.6f, 0.5f};
    std::vector<float> wide(V, -1.0f);
    std::copy(next.begin(), next.end(), wide.begin());
    ASSERT_TRUE(summarised.FillRequest({}, &req, &penalized));
    EXPECT_EQ(PickLikeAStage(summarised, SummarizeLogitRow(wide, req), wide, {}), whole.Sample(wide, {}));
  }
}

TEST(EngineSummaries, StepSummariesEqualSummariesOfStepLogits) {
  const std::string dir = testing_util::MakeCheckpoint("summaries", testing_util::SmallModel());
  auto engine = Engine::Load(dir, EngineOptions{.precision = Precision::kFp32, .threads = 1});
  ASSERT_TRUE(engine.ok()) << engine.status();
  Engine& e = **engine;
  const std::vector<int32_t> a = {5, 9, 2, 7, 7, 1, 0, 33, 12, 4, 8}, b = {100, 3};
  const std::vector<int32_t> penalized = {7, 12};
  const LogitRowRequest requests[] = {{.best = 5, .top_raw = 3},
                                      {.best = 300, .top_raw = 0, .repetition_penalty = 1.5f, .penalized_ids = penalized}};

  auto kv_a = e.NewSequence(), kv_b = e.NewSequence();
  const StepInput inputs[] = {{kv_a.get(), a}, {kv_b.get(), b}};
  auto logits = e.Step(inputs);
  ASSERT_TRUE(logits.ok()) << logits.status();

  auto kv_a2 = e.NewSequence(), kv_b2 = e.NewSequence();
  const StepInput inputs2[] = {{kv_a2.get(), a}, {kv_b2.get(), b}};
  auto summaries = e.StepSummaries(inputs2, requests);
  ASSERT_TRUE(summaries.ok()) << summaries.status();
  ASSERT_EQ(summaries->size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const LogitRowSummary want = SummarizeLogitRow((*logits)[i], requests[i]);
    const LogitRowSummary& got = (*summaries)[i];
    ExpectSameEntries(got.best, want.best);
    ExpectSameEntries(got.top_raw, want.top_raw);
    EXPECT_EQ(got.log_sum_exp, want.log_sum_exp);
    EXPECT_EQ(got.fallback_id, want.fallback_id);
  }
  EXPECT_EQ((*summaries)[0].best.size(), 5u);
  EXPECT_EQ((*summaries)[1].best.size(), 300u);
  EXPECT_EQ(kv_a2->length(), static_cast<int64_t>(a.size()));

  const LogitRowRequest one[] = {{.best = 1}};
  EXPECT_EQ(e.StepSummaries(inputs2, one).status().code(), absl::StatusCode::kInvalidArgument);

  // The kept final hidden rows give the whole rows again (what generate does when a nucleus outgrows
  // its summary).
  auto kv_a3 = e.NewSequence(), kv_b3 = e.NewSequence();
  const StepInput inputs3[] = {{kv_a3.get(), a}, {kv_b3.get(), b}};
  std::vector<float> hidden;
  ASSERT_TRUE(e.StepSummaries(inputs3, requests, &hidden).ok());
  ASSERT_EQ(hidden.size(), 2u * e.config().hidden_size);
  auto again = e.Logits(hidden, 2);
  ASSERT_TRUE(again.ok()) << again.status();
  const size_t V = static_cast<size_t>(e.config().vocab_size);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(0, std::memcmp(again->data() + i * V, (*logits)[i].data(), V * sizeof(float))) << "input " << i;
  }
  EXPECT_EQ(e.Logits(hidden, 3).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace layerpipe
