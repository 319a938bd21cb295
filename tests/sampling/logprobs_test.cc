// Log-probabilities of a logits row (engine/sampling/logprobs.h).
#include "engine/sampling/logprobs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace layerpipe {
namespace {

TEST(Logprobs, LogSumExpAndTopMatchADirectComputation) {
  const std::vector<float> row = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f, -std::numeric_limits<float>::infinity(),
                                  std::numeric_limits<float>::quiet_NaN()};
  double sum = 0;
  for (float v : {1.0f, 3.0f, -2.0f, 3.0f, 0.5f}) sum += std::exp(double(v));
  const double lse = LogSumExp(row);
  EXPECT_NEAR(lse, std::log(sum), 1e-12);
  const auto top = TopLogprobs(row, 3, lse);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].id, 1);  // tie with id 3: the lower id first
  EXPECT_EQ(top[1].id, 3);
  EXPECT_EQ(top[2].id, 0);
  EXPECT_NEAR(top[0].logprob, 3.0 - std::log(sum), 1e-6);
  EXPECT_NEAR(top[2].logprob, 1.0 - std::log(sum), 1e-6);
  EXPECT_TRUE(TopLogprobs(row, 0, lse).empty());
  EXPECT_EQ(TopLogprobs(row, 50, lse).size(), row.size());
}

TEST(Logprobs, TopKOverALargeRowEqualsAFullSort) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> dist(-50, 50);  // many ties
  std::vector<float> row(5000);
  for (float& v : row) v = dist(rng) * 0.25f;
  std::vector<int32_t> order(row.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  const auto top = TopLogprobs(row, 20, 0.0);
  ASSERT_EQ(top.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(top[i].id, order[i]) << i;
    EXPECT_EQ(top[i].logprob, row[order[i]]);
  }
}

}  // namespace
}  // namespace layerpipe
