// --quantize-head int8: the embedding (tied head) quantized at load by the int8 rule, the same q · s on
// the stage that looks tokens up and the one that computes the head.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "engine/engine.h"
#include "engine/model/bf16.h"
#include "engine/model/quantize.h"
#include "engine/model/weights.h"
#include "tests/engine/test_util.h"

namespace layerpipe {
namespace {

absl::StatusOr<std::unique_ptr<ModelWeights>> Load(const std::string& dir, WeightSelection sel, WeightFormat head,
                                                   WeightFormat layers = WeightFormat::kBf16) {
  auto c = LoadModelConfig(dir);
  if (!c.ok()) return c.status();
  WeightLoadOptions o;
  o.huge_pages = true;
  o.tile_layer_matrices = true;
  o.quantize = layers;
  o.quantize_head = head;
  return ModelWeights::Load(dir, *c, sel, o);
}

TEST(HeadQuantizationTest, EmbeddingIsTheInt8RuleOfItsRows) {
  const std::string dir = testing_util::MakeCheckpoint("head_int8", testing_util::SmallModel());
  auto stored = Load(dir, {0, 5, true, true}, WeightFormat::kBf16);
  auto quantized = Load(dir, {0, 5, true, true}, WeightFormat::kInt8);
  ASSERT_TRUE(stored.ok() && quantized.ok()) << quantized.status();
  const WeightMatrix& e = (*quantized)->embed_tokens();
  EXPECT_EQ(e.format, WeightFormat::kInt8);
  EXPECT_EQ((*stored)->embed_tokens().format, WeightFormat::kBf16);
  EXPECT_EQ((*quantized)->layer(0).q_proj.format, WeightFormat::kBf16);  // the layers as asked: stored
  const int64_t H = e.cols;
  std::vector<float> row(H), got(H);
  int8_t q[kQuantGroup];
  bool moved = false;
  for (int64_t r = 0; r < e.rows; ++r) {
    ReadRowF32((*stored)->embed_tokens(), r, row.data());
    ReadRowF32(e, r, got.data());
    for (int64_t c0 = 0; c0 < H; c0 += kQuantGroup) {
      const int64_t n = std::min(kQuantGroup, H - c0);
      const float s = Bf16ToF32(QuantizeGroupInt8(row.data() + c0, n, q));
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[c0 + i], static_cast<float>(q[i]) * s) << "row " << r << " col " << c0 + i;
        moved |= got[c0 + i] != row[c0 + i];
      }
    }
  }
  EXPECT_TRUE(moved) << "the int8 embedding equals the bf16 one: nothing was quantized";
}

// The first stage (token lookups) and the last (the head) hold the same bytes.
TEST(HeadQuantizationTest, FirstAndLastStageHoldTheSameEmbedding) {
  const std::string dir = testing_util::MakeCheckpoint("head_split", testing_util::SmallModel());
  auto first = Load(dir, {0, 2, true, false}, WeightFormat::kInt8);
  auto last = Load(dir, {2, 5, false, true}, WeightFormat::kInt8);
  ASSERT_TRUE(first.ok() && last.ok()) << first.status() << last.status();
  const WeightMatrix &a = (*first)->embed_tokens(), &b = (*last)->embed_tokens();
  ASSERT_EQ(a.format, WeightFormat::kInt8);
  ASSERT_EQ(a.bytes(), b.bytes());
  EXPECT_EQ(0, std::memcmp(a.data, b.data, a.bytes()));
}

// The head's logits move, and a whole engine runs on it with quantized layers too.
TEST(HeadQuantizationTest, EngineScoresWithAnInt8Head) {
  const std::string dir = testing_util::MakeCheckpoint("head_engine", testing_util::SmallModel());
  const std::vector<int32_t> ids = {2, 10, 20, 30, 40, 50, 60, 70};
  EngineOptions plain, head;
  plain.precision = head.precision = Precision::kFp32;
  plain.quantize = head.quantize = WeightFormat::kInt4;
  head.quantize_head = WeightFormat::kInt8;
  auto a = Engine::Load(dir, plain);
  auto b = Engine::Load(dir, head);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  auto la = (*a)->Score(ids);
  auto lb = (*b)->Score(ids);
  ASSERT_TRUE(la.ok() && lb.ok()) << lb.status();
  float moved = 0;
  for (size_t i = 0; i < la->size(); ++i) moved = std::max(moved, std::abs((*la)[i] - (*lb)[i]));
  EXPECT_GT(moved, 1e-3f);
}

TEST(HeadQuantizationTest, OnlyNoneAndInt8AreValues) {
  EXPECT_EQ(*ParseHeadQuantization("none"), WeightFormat::kBf16);
  EXPECT_EQ(*ParseHeadQuantization("int8"), WeightFormat::kInt8);
  auto bad = ParseHeadQuantization("int4");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("--quantize-head must be none or int8, got \"int4\""),
            std::string::npos)
      << bad.status();
  EXPECT_EQ(QuantizationName(WeightFormat::kBf16), "none");
  EXPECT_EQ(QuantizationName(WeightFormat::kInt8), "int8");
}

}  // namespace
}  // namespace layerpipe
