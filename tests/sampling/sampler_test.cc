#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace layerpipe {
namespace {

constexpr int kGemmaVocab = 262144;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> LogProbs(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

std::map<int32_t, int> Histogram(Sampler& sampler, const std::vector<float>& logits, int draws,
                                 const std::vector<int32_t>& history = {}) {
  std::map<int32_t, int> counts;
  for (int i = 0; i < draws; ++i) ++counts[sampler.Sample(logits, history)];
  return counts;
}

std::set<int32_t> Keys(const std::map<int32_t, int>& counts) {
  std::set<int32_t> keys;
  for (const auto& [id, n] : counts) keys.insert(id);
  return keys;
}

std::set<int32_t> DistributionIds(Sampler& sampler, const std::vector<float>& logits) {
  std::set<int32_t> ids;
  for (const TokenProbability& t : sampler.Distribution(logits, {})) ids.insert(t.id);
  return ids;
}

SamplingParams Temperature(float t, uint64_t seed = 7) {
  SamplingParams p;
  p.temperature = t;
  p.seed = seed;
  return p;
}

// ---------------------------------------------------------------- greedy

TEST(SamplerGreedy, PicksArgmax) {
  Sampler sampler(SamplingParams{}, 5);
  EXPECT_EQ(sampler.Sample(std::vector<float>{0.1f, -3.0f, 2.5f, 2.4f, 0.0f}, {}), 2);
  EXPECT_EQ(sampler.Sample(std::vector<float>{-5.0f, -1.0f, -2.0f, -9.0f, -1.5f}, {}), 1);
}

TEST(SamplerGreedy, TieGoesToLowestId) {
  Sampler sampler(SamplingParams{}, 6);
  EXPECT_EQ(sampler.Sample(std::vector<float>{1, 3, 2, 3, 3, 0}, {}), 1);
  EXPECT_EQ(sampler.Sample(std::vector<float>{7, 7, 7, 7, 7, 7}, {}), 0);
}

TEST(SamplerGreedy, IgnoresFiltersAndIsDeterministicAcrossSeeds) {
  SamplingParams p;
  p.top_k = 3;
  p.top_p = 0.5f;
  p.min_p = 0.2f;
  std::vector<float> logits = {0.5f, 4.0f, 4.0f, -1.0f};
  for (uint64_t seed : {0u, 1u, 99u}) {
    p.seed = seed;
    Sampler sampler(p, 4);
    EXPECT_EQ(sampler.Sample(logits, {}), 1);
  }
}

TEST(SamplerGreedy, FullVocabulary) {
  std::vector<float> logits(kGemmaVocab, -2.0f);
  logits[kGemmaVocab - 1] = 3.0f;
  logits[123456] = 3.0f;
  Sampler sampler(SamplingParams{}, kGemmaVocab);
  EXPECT_EQ(sampler.Sample(logits, {}), 123456);
}

// ---------------------------------------------------------------- banned ids and odd values

TEST(SamplerBanned, NeverChosenByGreedyEvenWithTheMaxLogit) {
  std::vector<float> logits(kGemmaVocab, 0.0f);
  logits[258882] = 100.0f;
  logits[258883] = 90.0f;
  logits[42] = 1.0f;
  Sampler sampler(SamplingParams{}, kGemmaVocab);
  EXPECT_EQ(sampler.Sample(logits, {}), 42);
}

TEST(SamplerBanned, NeverSampled) {
  std::vector<float> logits(kGemmaVocab, -30.0f);
  logits[258882] = 30.0f;
  logits[258883] = 30.0f;
  logits[10] = 1.0f;
  logits[11] = 0.5f;
  SamplingParams p = Temperature(1.0f);
  Sampler sampler(p, kGemmaVocab);
  for (int i = 0; i < 200; ++i) {
    const int32_t id = sampler.Sample(logits, {});
    ASSERT_NE(id, 258882);
    ASSERT_NE(id, 258883);
  }
  // And the filtered distribution agrees: they are not even candidates.
  for (const TokenProbability& t : sampler.Distribution(logits, {})) {
    EXPECT_NE(t.id, 258882);
    EXPECT_NE(t.id, 258883);
  }
}

TEST(SamplerBanned, SmallVocabularyIsUnaffected) {
  Sampler sampler(SamplingParams{}, 4);
  EXPECT_EQ(sampler.Sample(std::vector<float>{0, 0, 5, 0}, {}), 2);
}

TEST(SamplerOddValues, EntriesBeyondVocabSizeAreIgnored) {
  // A logit row padded past the vocabulary must not yield an out-of-vocabulary id.
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, 50.0f, 60.0f};
  Sampler greedy(SamplingParams{}, 3);
  EXPECT_EQ(greedy.Sample(logits, {}), 2);
  Sampler sampled(Temperature(1.0f), 3);
  for (int i = 0; i < 300; ++i) ASSERT_LT(sampled.Sample(logits, {}), 3);
}

TEST(SamplerOddValues, NaNIsNegativeInfinity) {
  Sampler greedy(SamplingParams{}, 4);
  EXPECT_EQ(greedy.Sample(std::vector<float>{kNaN, 1.0f, kNaN, 0.5f}, {}), 1);
  Sampler sampled(Temperature(1.0f), 4);
  for (int i = 0; i < 300; ++i) {
    const int32_t id = sampled.Sample(std::vector<float>{kNaN, 1.0f, kNaN, 0.5f}, {});
    ASSERT_TRUE(id == 1 || id == 3) << id;
  }
}

TEST(SamplerOddValues, NothingFiniteFallsBackToRawArgmaxThenZero) {
  for (float t : {0.0f, 1.0f}) {
    Sampler sampler(Temperature(t), 4);
    EXPECT_EQ(sampler.Sample(std::vector<float>{kNaN, kNaN, kNaN, kNaN}, {}), 0);
    EXPECT_EQ(sampler.Sample(std::vector<float>{-kInf, -kInf, -kInf, -kInf}, {}), 0);
    EXPECT_EQ(sampler.Sample(std::vector<float>{kNaN, -kInf, kNaN, -kInf}, {}), 1);
    EXPECT_EQ(sampler.Sample(std::vector<float>{}, {}), 0);
  }
  // Only banned ids have a finite logit: the fallback still never returns them.
  std::vector<float> logits(kGemmaVocab, -kInf);
  logits[258882] = 5.0f;
  logits[258883] = 5.0f;
  Sampler sampler(Temperature(0.7f), kGemmaVocab);
  EXPECT_EQ(sampler.Sample(logits, {}), 0);
}

TEST(SamplerOddValues, PositiveInfinitySharesTheMass) {
  std::vector<float> logits = {0.0f, kInf, 3.0f, kInf};
  Sampler greedy(SamplingParams{}, 4);
  EXPECT_EQ(greedy.Sample(logits, {}), 1);
  Sampler sampler(Temperature(1.0f), 4);
  const auto counts = Histogram(sampler, logits, 1000);
  EXPECT_EQ(Keys(counts), (std::set<int32_t>{1, 3}));
  EXPECT_NEAR(counts.at(1) / 1000.0, 0.5, 0.06);
}

// ---------------------------------------------------------------- temperature

TEST(SamplerTemperature, FrequenciesMatchSoftmax) {
  const std::vector<float> logits = LogProbs({0.1, 0.2, 0.3, 0.4});
  Sampler sampler(Temperature(1.0f), 4);
  const int draws = 40000;
  const auto counts = Histogram(sampler, logits, draws);
  for (int id = 0; id < 4; ++id) {
    // 4.5 sigma of a binomial proportion at n = 40000 is below 0.011.
    EXPECT_NEAR(counts.at(id) / static_cast<double>(draws), 0.1 * (id + 1), 0.011) << id;
  }
}

TEST(SamplerTemperature, TemperatureReshapesTheDistribution) {
  // Logits log(p) at temperature 2 give probabilities proportional to sqrt(p).
  const std::vector<double> p = {0.04, 0.16, 0.36, 0.44};
  Sampler sampler(Temperature(2.0f), 4);
  const auto dist = sampler.Distribution(LogProbs(p), {});
  ASSERT_EQ(dist.size(), 4u);
  double norm = 0;
  for (double x : p) norm += std::sqrt(x);
  for (const TokenProbability& t : dist) {
    EXPECT_NEAR(t.probability, std::sqrt(p[t.id]) / norm, 1e-6) << t.id;
  }
  // Best first.
  EXPECT_EQ(dist.front().id, 3);
  EXPECT_EQ(dist.back().id, 0);
}

TEST(SamplerTemperature, TinyTemperatureIsEffectivelyGreedy) {
  Sampler sampler(Temperature(1e-6f), 4);
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(sampler.Sample(std::vector<float>{1.0f, 1.01f, 0.99f, -5.0f}, {}), 1);
  }
}

// ---------------------------------------------------------------- top-k

TEST(SamplerTopK, OnlyTheKBestEverAppear) {
  // A flat distribution: without top-k every id would show up.
  std::vector<float> logits(1000, 4.0f);
  logits[17] = 4.3f;
  logits[900] = 4.2f;
  logits[5] = 4.1f;
  SamplingParams p = Temperature(1.0f);
  p.top_k = 2;
  Sampler sampler(p, 1000);
  const auto counts = Histogram(sampler, logits, 2000);
  EXPECT_EQ(Keys(counts), (std::set<int32_t>{17, 900}));
  // Renormalised over the two: e^0.3 / (e^0.3 + e^0.2) = 0.525.
  EXPECT_NEAR(counts.at(17) / 2000.0, 0.525, 0.05);
}

TEST(SamplerTopK, TiesAtTheBoundaryKeepTheLowestIds) {
  std::vector<float> logits = {1.0f, 2.0f, 1.0f, 2.0f, 2.0f, 0.0f};
  SamplingParams p = Temperature(1.0f);
  p.top_k = 2;
  Sampler sampler(p, 6);
  EXPECT_EQ(DistributionIds(sampler, logits), (std::set<int32_t>{1, 3}));
  p.top_k = 4;
  Sampler wider(p, 6);
  EXPECT_EQ(DistributionIds(wider, logits), (std::set<int32_t>{0, 1, 3, 4}));
}

TEST(SamplerTopK, KLargerThanVocabularyKeepsEverything) {
  SamplingParams p = Temperature(1.0f);
  p.top_k = 100;
  Sampler sampler(p, 3);
  EXPECT_EQ(sampler.Distribution(std::vector<float>{0, 1, 2}, {}).size(), 3u);
}

TEST(SamplerTopK, FullVocabularyMatchesAFullSort) {
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(kGemmaVocab);
  for (float& x : logits) x = normal(gen);
  SamplingParams p = Temperature(1.0f);
  p.top_k = 64;
  Sampler sampler(p, kGemmaVocab);

  std::vector<int32_t> order(kGemmaVocab);
  std::iota(order.begin(), order.end(), 0);
  std::erase_if(order, [](int32_t id) { return id == 258882 || id == 258883; });
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  const auto dist = sampler.Distribution(logits, {});
  ASSERT_EQ(dist.size(), 64u);
  for (size_t i = 0; i < dist.size(); ++i) EXPECT_EQ(dist[i].id, order[i]) << i;
  for (int i = 0; i < 500; ++i) {
    const int32_t id = sampler.Sample(logits, {});
    ASSERT_TRUE(std::find(order.begin(), order.begin() + 64, id) != order.begin() + 64) << id;
  }
}

// ---------------------------------------------------------------- top-p

TEST(SamplerTopP, SmallTopPLeavesOnlyTheArgmax) {
  // p(321) = 1 / (1 + 499 e^-3) = 0.039: above top_p, while 96% of unfiltered draws would be
  // others.
  std::vector<float> logits(500, 1.0f);
  logits[321] = 4.0f;
  SamplingParams p = Temperature(1.0f);
  p.top_p = 0.01f;
  Sampler sampler(p, 500);
  const auto counts = Histogram(sampler, logits, 2000);
  EXPECT_EQ(Keys(counts), (std::set<int32_t>{321}));
}

TEST(SamplerTopP, KeepsTheSmallestPrefixReachingP) {
  const std::vector<float> logits = LogProbs({0.15, 0.5, 0.05, 0.3});
  SamplingParams p = Temperature(1.0f);
  p.top_p = 0.75f;  // 0.5 < 0.75 <= 0.8
  Sampler two(p, 4);
  EXPECT_EQ(DistributionIds(two, logits), (std::set<int32_t>{1, 3}));
  const auto counts = Histogram(two, logits, 2000);
  EXPECT_EQ(Keys(counts), (std::set<int32_t>{1, 3}));
  EXPECT_NEAR(counts.at(1) / 2000.0, 0.5 / 0.8, 0.05);

  p.top_p = 0.9f;  // 0.8 < 0.9 <= 0.95
  Sampler three(p, 4);
  EXPECT_EQ(DistributionIds(three, logits), (std::set<int32_t>{0, 1, 3}));
  p.top_p = 1.0f;
  Sampler all(p, 4);
  EXPECT_EQ(DistributionIds(all, logits), (std::set<int32_t>{0, 1, 2, 3}));
}

TEST(SamplerTopP, RenormalisesOverTheTopKSurvivors) {
  // Top-2 renormalised: {0.571, 0.429}; 0.571 already reaches 0.55, so only id 0 is left. Without
  // the renormalisation 0.4 < 0.55 would keep id 1 as well.
  const std::vector<float> logits = LogProbs({0.4, 0.3, 0.2, 0.1});
  SamplingParams p = Temperature(1.0f);
  p.top_k = 2;
  p.top_p = 0.55f;
  Sampler sampler(p, 4);
  EXPECT_EQ(DistributionIds(sampler, logits), (std::set<int32_t>{0}));
}

TEST(SamplerTopP, FullVocabularyNucleusMatchesAFullSort) {
  // A nucleus of several hundred tokens spread over several quarter-nat probability bands: whole
  // bands are taken unsorted and only the band where the nucleus ends is sorted.
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> logits(kGemmaVocab);
  for (int i = 0; i < kGemmaVocab; ++i) logits[i] = (i % 257 == 0 ? 8.0f : -8.0f) + uniform(gen);
  SamplingParams p = Temperature(1.0f);
  p.top_p = 0.9f;
  Sampler sampler(p, kGemmaVocab);

  std::vector<int32_t> order(kGemmaVocab);
  std::iota(order.begin(), order.end(), 0);
  std::erase_if(order, [](int32_t id) { return id == 258882 || id == 258883; });
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  const double max_logit = logits[order[0]];
  double total = 0;
  for (int32_t id : order) total += std::exp(logits[id] - max_logit);
  size_t expected = 0;
  for (double cumulative = 0; cumulative < 0.9 * total; ++expected) {
    cumulative += std::exp(logits[order[expected]] - max_logit);
  }
  ASSERT_GT(expected, 320u);
  ASSERT_LT(expected, 1021u);  // 1021 tokens sit at the +8 level

  const auto dist = sampler.Distribution(logits, {});
  ASSERT_EQ(dist.size(), expected);
  for (size_t i = 0; i < dist.size(); ++i) ASSERT_EQ(dist[i].id, order[i]) << i;
  const std::set<int32_t> nucleus(order.begin(), order.begin() + expected);
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(nucleus.count(sampler.Sample(logits, {})));
}

// ---------------------------------------------------------------- min-p

TEST(SamplerMinP, CutsIdsBelowTheRelativeThreshold) {
  // Threshold 0.15 * 0.5 = 0.075: ids 0, 1, 2 stay; 3 (0.06) and 4 (0.04) go.
  const std::vector<float> logits = LogProbs({0.5, 0.3, 0.1, 0.06, 0.04});
  SamplingParams p = Temperature(1.0f);
  p.min_p = 0.15f;
  Sampler sampler(p, 5);
  EXPECT_EQ(DistributionIds(sampler, logits), (std::set<int32_t>{0, 1, 2}));
  const auto counts = Histogram(sampler, logits, 3000);
  EXPECT_EQ(Keys(counts), (std::set<int32_t>{0, 1, 2}));
  EXPECT_NEAR(counts.at(2) / 3000.0, 0.1 / 0.9, 0.03);
}

TEST(SamplerMinP, AppliesAfterTopP) {
  const std::vector<float> logits = LogProbs({0.2, 0.5, 0.3});
  SamplingParams p = Temperature(1.0f);
  p.top_p = 0.9f;
  p.min_p = 0.5f;  // threshold 0.25 removes id 0 from the top-p nucleus {0, 1, 2}
  Sampler sampler(p, 3);
  const auto dist = sampler.Distribution(logits, {});
  ASSERT_EQ(dist.size(), 2u);
  EXPECT_EQ(dist[0].id, 1);
  EXPECT_EQ(dist[1].id, 2);
  EXPECT_NEAR(dist[0].probability, 0.625, 1e-6);
}

TEST(SamplerMinP, UsesTheTemperedDistribution) {
  // At temperature 2, p ∝ sqrt(p0): ratios 1, 0.5, 0.25 instead of 1, 0.25, 0.0625.
  const std::vector<float> logits = LogProbs({0.64, 0.16, 0.04});
  SamplingParams p = Temperature(2.0f);
  p.min_p = 0.2f;
  Sampler sampler(p, 3);
  EXPECT_EQ(DistributionIds(sampler, logits), (std::set<int32_t>{0, 1, 2}));
  p.temperature = 1.0f;
  Sampler cold(p, 3);
  EXPECT_EQ(DistributionIds(cold, logits), (std::set<int32_t>{0, 1}));
}

// ---------------------------------------------------------------- all filters vs. a reference

// The pipeline as the header states it, written the obvious way: full sort, double precision.
std::vector<TokenProbability> ReferenceDistribution(const std::vector<float>& logits,
                                                    const SamplingParams& p) {
  std::vector<int32_t> order;
  for (int32_t id = 0; id < static_cast<int32_t>(logits.size()); ++id) {
    if (logits[id] > -kInf) order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  const double max_logit = logits[order[0]];
  std::vector<std::pair<int32_t, double>> kept;
  for (int32_t id : order) {
    const double x = (logits[id] - max_logit) / p.temperature;
    if (x >= -80.0) kept.push_back({id, std::exp(x)});
  }
  if (p.top_k > 0 && kept.size() > static_cast<size_t>(p.top_k)) kept.resize(p.top_k);
  double total = 0;
  for (const auto& [id, w] : kept) total += w;
  if (p.top_p < 1) {
    size_t keep = 0;
    for (double cumulative = 0; keep < kept.size() && cumulative < p.top_p * total; ++keep) {
      cumulative += kept[keep].second;
    }
    kept.resize(keep);
  }
  std::erase_if(kept, [&](const auto& entry) { return entry.second < p.min_p; });
  double mass = 0;
  for (const auto& [id, w] : kept) mass += w;
  std::vector<TokenProbability> out;
  for (const auto& [id, w] : kept) out.push_back({id, w / mass});
  return out;
}

TEST(SamplerFilters, MatchABruteForceReference) {
  std::mt19937 gen(77);
  int cases = 0;
  for (int row = 0; row < 12; ++row) {
    // Varied shapes: wide or narrow spreads, ties (quantised logits), masked entries, a dominant
    // token; sizes that leave a partial vectorisation block at the end.
    const int vocab = 3000 + 37 * row;
    const float spread = row % 3 == 0 ? 0.5f : (row % 3 == 1 ? 3.0f : 12.0f);
    std::normal_distribution<float> normal(0.0f, spread);
    std::vector<float> logits(vocab);
    for (float& x : logits) x = normal(gen);
    if (row % 2 == 1) {
      for (float& x : logits) x = std::round(x * 4) / 4;
    }
    if (row % 4 == 2) {
      for (int i = 0; i < vocab; i += 7) logits[i] = -kInf;
    }
    if (row % 5 == 4) logits[vocab / 2] += 25.0f;

    for (float t : {0.5f, 1.0f, 2.0f}) {
      for (int k : {0, 5, 200}) {
        for (float top_p : {0.3f, 0.9f, 1.0f}) {
          for (float min_p : {0.0f, 0.01f, 0.3f}) {
            SamplingParams p = Temperature(t);
            p.top_k = k;
            p.top_p = top_p;
            p.min_p = min_p;
            Sampler sampler(p, vocab);
            const auto got = sampler.Distribution(logits, {});
            const auto want = ReferenceDistribution(logits, p);
            const std::string label = "row " + std::to_string(row) + " T " + std::to_string(t) +
                                      " k " + std::to_string(k) + " p " + std::to_string(top_p) +
                                      " min_p " + std::to_string(min_p);
            ASSERT_EQ(got.size(), want.size()) << label;
            for (size_t i = 0; i < got.size(); ++i) {
              ASSERT_EQ(got[i].id, want[i].id) << label << " rank " << i;
              ASSERT_NEAR(got[i].probability, want[i].probability, 1e-6) << label << " rank " << i;
            }
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 12 * 81);
}

// ---------------------------------------------------------------- repetition penalty

TEST(SamplerRepetitionPenalty, DividesPositiveAndMultipliesNegativeLogits) {
  SamplingParams p;
  p.repetition_penalty = 1.1f;
  Sampler sampler(p, 4);
  // 2.0 / 1.1 = 1.82 < 1.9.
  EXPECT_EQ(sampler.Sample(std::vector<float>{2.0f, 1.9f, 0, 0}, std::vector<int32_t>{0}), 1);
  // -1.0 * 1.1 = -1.1 < -1.05.
  EXPECT_EQ(sampler.Sample(std::vector<float>{-1.0f, -1.05f, -3, -3}, std::vector<int32_t>{0}), 1);
  // Not in history: untouched.
  EXPECT_EQ(sampler.Sample(std::vector<float>{2.0f, 1.9f, 0, 0}, std::vector<int32_t>{2, 3}), 0);
}

TEST(SamplerRepetitionPenalty, RepeatedIdsArePenalisedOnce) {
  SamplingParams p;
  p.repetition_penalty = 1.1f;
  Sampler sampler(p, 2);
  // Once: 1.82 > 1.7. Three times would be 1.50 < 1.7.
  EXPECT_EQ(sampler.Sample(std::vector<float>{2.0f, 1.7f}, std::vector<int32_t>{0, 0, 0}), 0);
  // The penalty state does not leak into the next call.
  EXPECT_EQ(sampler.Sample(std::vector<float>{2.0f, 1.9f}, std::vector<int32_t>{0}), 1);
  EXPECT_EQ(sampler.Sample(std::vector<float>{2.0f, 1.9f}, std::vector<int32_t>{0}), 1);
  EXPECT_EQ(sampler.Sample(std::vector<float>{2.0f, 1.9f}, {}), 0);
}

TEST(SamplerRepetitionPenalty, OutOfRangeHistoryIdsAreIgnored) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  Sampler sampler(p, 3);
  EXPECT_EQ(sampler.Sample(std::vector<float>{0, 3, 2}, std::vector<int32_t>{-1, 3, 999999}), 1);
}

TEST(SamplerRepetitionPenalty, ShiftsSampledProbabilities) {
  SamplingParams p = Temperature(1.0f);
  p.repetition_penalty = 2.0f;
  Sampler sampler(p, 2);
  // logits {2, 0} -> {1, 0} after the penalty: p(0) = e / (e + 1) = 0.731.
  const auto dist =
      sampler.Distribution(std::vector<float>{2.0f, 0.0f}, std::vector<int32_t>{0, 1});
  ASSERT_EQ(dist.size(), 2u);
  EXPECT_EQ(dist[0].id, 0);
  EXPECT_NEAR(dist[0].probability, std::exp(1.0) / (std::exp(1.0) + 1.0), 1e-6);
}

// ---------------------------------------------------------------- determinism

std::vector<int32_t> Generate(const SamplingParams& p, int vocab, int steps) {
  std::mt19937 gen(1234);  // the logits are the same for every call
  std::normal_distribution<float> normal(0.0f, 2.0f);
  Sampler sampler(p, vocab);
  std::vector<float> logits(vocab);
  std::vector<int32_t> tokens;
  for (int s = 0; s < steps; ++s) {
    for (float& x : logits) x = normal(gen);
    tokens.push_back(sampler.Sample(logits, tokens));
  }
  return tokens;
}

TEST(SamplerDeterminism, SameSeedSameTokensDifferentSeedDifferentTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 64;
  p.top_p = 0.95f;
  p.repetition_penalty = 1.05f;
  p.seed = 2024;
  const auto a = Generate(p, 4096, 200);
  const auto b = Generate(p, 4096, 200);
  EXPECT_EQ(a, b);
  p.seed = 2025;
  const auto c = Generate(p, 4096, 200);
  EXPECT_NE(a, c);
  int differing = 0;
  for (size_t i = 0; i < a.size(); ++i) differing += a[i] != c[i];
  EXPECT_GT(differing, 50);
}

TEST(SamplerDeterminism, DrawsFollowTheStandardMt19937_64Stream) {
  // Ten equal logits give weights of exactly 1, so the id is floor(u * 10) with u built from the
  // top 53 bits of each mt19937_64 output: the engine's tokens are pinned to a generator the C++
  // standard defines bit for bit, not to one standard library's distributions.
  const uint64_t seed = 987654321;
  std::mt19937_64 reference(seed);
  Sampler sampler(Temperature(0.8f, seed), 10);
  const std::vector<float> logits(10, 0.25f);
  for (int i = 0; i < 1000; ++i) {
    const double u = static_cast<double>(reference() >> 11) * 0x1.0p-53;
    ASSERT_EQ(sampler.Sample(logits, {}), static_cast<int32_t>(u * 10)) << "draw " << i;
  }
}

TEST(SamplerDeterminism, OneRandomNumberPerSampledStep) {
  // A step whose outcome is forced still advances the stream, so the tokens after it do not depend
  // on how constrained the earlier steps were.
  Sampler a(Temperature(1.0f, 5), 8);
  Sampler b(Temperature(1.0f, 5), 8);
  std::vector<float> forced(8, -kInf);
  forced[3] = 0.0f;
  std::vector<float> flat(8, 0.0f);
  a.Sample(forced, {});
  b.Sample(flat, {});
  for (int i = 0; i < 50; ++i) ASSERT_EQ(a.Sample(flat, {}), b.Sample(flat, {}));
}

TEST(SamplerDeterminism, DiscardResumesTheStreamOfAReplayedSequence) {
  // A sequence that already sampled k tokens elsewhere resumes with Discard(k): from then on it
  // draws exactly what the original sampler draws.
  const std::vector<float> flat(16, 0.0f);
  Sampler original(Temperature(0.9f, 77), 16);
  for (int i = 0; i < 37; ++i) original.Sample(flat, {});
  Sampler resumed(Temperature(0.9f, 77), 16);
  resumed.Discard(37);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(resumed.Sample(flat, {}), original.Sample(flat, {})) << "draw " << i;
  // Nothing to skip: unchanged.
  Sampler fresh(Temperature(0.9f, 77), 16), skipped_none(Temperature(0.9f, 77), 16);
  skipped_none.Discard(0);
  skipped_none.Discard(-3);
  for (int i = 0; i < 20; ++i) ASSERT_EQ(skipped_none.Sample(flat, {}), fresh.Sample(flat, {}));
}

// ---------------------------------------------------------------- validation

TEST(SamplingParamsValidation, AcceptsDefaultsAndGemmaSuggestions) {
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}).ok());
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 64;
  p.top_p = 0.95f;
  p.min_p = 0.05f;
  p.repetition_penalty = 1.1f;
  EXPECT_TRUE(ValidateSamplingParams(p).ok());
}

void ExpectInvalid(const SamplingParams& p, const std::string& needle) {
  const absl::Status status = ValidateSamplingParams(p);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << needle;
  EXPECT_NE(status.message().find(needle), std::string_view::npos) << status.message();
}

TEST(SamplingParamsValidation, RejectsEachBadField) {
  SamplingParams p;
  p.temperature = -0.5f;
  ExpectInvalid(p, "temperature must be a finite number >= 0 (0 = greedy), got -0.5");
  p.temperature = kNaN;
  ExpectInvalid(p, "temperature");
  p.temperature = kInf;
  ExpectInvalid(p, "got inf");

  p = SamplingParams{};
  p.top_k = -1;
  ExpectInvalid(p, "top_k must be >= 0 (0 = disabled), got -1");

  p = SamplingParams{};
  p.top_p = 0.0f;
  ExpectInvalid(p, "top_p must be in (0, 1] (1 = disabled), got 0");
  p.top_p = 1.5f;
  ExpectInvalid(p, "got 1.5");
  p.top_p = kNaN;
  ExpectInvalid(p, "top_p");

  p = SamplingParams{};
  p.min_p = 1.0f;
  ExpectInvalid(p, "min_p must be in [0, 1) (0 = disabled), got 1");
  p.min_p = -0.1f;
  ExpectInvalid(p, "min_p");

  p = SamplingParams{};
  p.repetition_penalty = 0.0f;
  ExpectInvalid(p, "repetition_penalty must be a finite number > 0 (1 = disabled), got 0");
  p.repetition_penalty = kNaN;
  ExpectInvalid(p, "repetition_penalty");
  p.repetition_penalty = -2.0f;
  ExpectInvalid(p, "got -2");
}

TEST(SamplingParamsValidation, UnvalidatedBadFieldsDegradeToDisabled) {
  SamplingParams p;
  p.temperature = kNaN;  // -> greedy
  p.top_p = 7.0f;
  p.repetition_penalty = kNaN;
  Sampler sampler(p, 3);
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(sampler.Sample(std::vector<float>{0, 2, 1}, std::vector<int32_t>{1}), 1);
  }
}

}  // namespace
}  // namespace layerpipe
