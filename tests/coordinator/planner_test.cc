#include "coordinator/scheduling/planner.h"

#include <gtest/gtest.h>

#include "engine/model/kv_bytes.h"
#include "nlohmann/json.hpp"

namespace layerpipe {
namespace {

ModelConfig Config12B() {
  nlohmann::json lt = nlohmann::json::array();
  for (int i = 0; i < 48; ++i) lt.push_back(i % 6 == 5 ? "full_attention" : "sliding_attention");
  nlohmann::json c = {{"hidden_size", 3840},       {"intermediate_size", 15360}, {"vocab_size", 262144},
                      {"num_hidden_layers", 48},   {"num_attention_heads", 16},  {"head_dim", 256},
                      {"num_key_value_heads", 8},  {"global_head_dim", 512},     {"num_global_key_value_heads", 1},
                      {"layer_types", lt},         {"attention_k_eq_v", true},   {"sliding_window", 1024},
                      {"max_position_embeddings", 262144},
                      {"rope_parameters",
                       {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
                        {"full_attention",
                         {{"rope_type", "proportional"},
                          {"rope_theta", 1000000.0},
                          {"partial_rotary_factor", 0.25}}}}}};
  auto cfg = ParseModelConfig(c.dump(), "test");
  EXPECT_TRUE(cfg.ok()) << cfg.status();
  return *cfg;
}

TEST(PlannerTest, RangesAreContiguousAndCoverEveryLayer) {
  const ModelConfig c = Config12B();
  for (int workers : {1, 2, 3, 4, 7, 48}) {
    auto ranges = PlanLayerRanges(c, workers);
    ASSERT_EQ(static_cast<int>(ranges.size()), workers);
    int next = 0;
    for (const LayerRange& r : ranges) {
      EXPECT_EQ(r.begin, next);
      EXPECT_GT(r.end, r.begin);
      next = r.end;
    }
    EXPECT_EQ(next, 48);
  }
}

TEST(PlannerTest, TheHeadMakesTheLastStageLighter) {
  auto ranges = PlanLayerRanges(Config12B(), 2);
  // The tied head (262144 x 3840) weighs about as much as four layers, so the last stage gets fewer.
  EXPECT_LT(ranges[1].end - ranges[1].begin, ranges[0].end - ranges[0].begin);
}

TEST(PlannerTest, ParsesAndValidatesExplicitSplits) {
  const ModelConfig c = Config12B();
  auto ok = ParseLayerSplit("0-4,5-5,6-47", c, 3);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[1].begin, 5);
  EXPECT_EQ((*ok)[1].end, 6);
  EXPECT_FALSE(ParseLayerSplit("0-4,6-47", c, 2).ok());       // gap
  EXPECT_FALSE(ParseLayerSplit("0-4,5-46", c, 2).ok());       // short
  EXPECT_FALSE(ParseLayerSplit("0-47", c, 2).ok());           // wrong worker count
  EXPECT_FALSE(ParseLayerSplit("0-x,5-47", c, 2).ok());       // not a number
  EXPECT_FALSE(ParseLayerSplit("0-10,5-47", c, 2).ok());      // overlap
}

// The coordinator admits with the worker's own formula (engine/model/kv_bytes.h); the real 12B shapes.
TEST(PlannerTest, KvBytesFollowTheCacheLayout) {
  const ModelConfig c = Config12B();
  // One sliding layer: a ring of 1024 rows of K and V, 8 heads x 256, bf16.
  EXPECT_EQ(KvBytesAtLength(c, 0, 1, Precision::kBf16, 10), 1024 * 2 * 8 * 256 * 2);
  // One full layer: pages of 256 joined rows (kv_layout.h), 1 head x 512 + the 128 rotated dims.
  EXPECT_EQ(KvBytesAtLength(c, 5, 6, Precision::kBf16, 10), 256 * 640 * 2);
  EXPECT_EQ(KvBytesAtLength(c, 5, 6, Precision::kBf16, 257), 512 * 640 * 2);
  // MODEL.md: 262,144 tokens of K and V rows apart would be 4 GiB in bf16 over the 8 full layers; the
  // joined rows keep 640 of their 1024 values: 2.5 GiB.
  EXPECT_EQ(KvBytesAtLength(c, 0, 48, Precision::kBf16, 262144) - 40 * int64_t{1024 * 2 * 8 * 256 * 2},
            (int64_t{5} << 30) / 2);
}

}  // namespace
}  // namespace layerpipe
