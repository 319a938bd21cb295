// A full layer's joined K/V rows (engine/model/joined_kv.h, kv_layout.h): the dim orders, the cache's
// views of a row, and which layers keep them. The forward pass through them is the oracle's to check
// (tests/oracle: fp32 and bf16 tiers, CPU and the CUDA emulator), the bits across splits and chunkings
// the determinism tests'.
#include "engine/model/joined_kv.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "engine/cpu/joined_order.h"
#include "engine/cpu/kv_cache.h"
#include "engine/model/kv_bytes.h"
#include "tests/engine/test_util.h"

namespace layerpipe {
namespace {

struct Shape {
  int hd, pairs;
};
constexpr Shape kShapes[] = {{512, 64}, {64, 8}, {32, 4}, {16, 4}, {48, 4}};

TEST(JoinedKv, ViewsOrderEveryDimOnceAndShareTheOtherDims) {
  for (const Shape s : kShapes) {
    std::set<int> keys, values;
    for (int j = 0; j < s.hd; ++j) {
      keys.insert(kv::JoinedKeyDim(j, s.hd, s.pairs));
      values.insert(kv::JoinedValueDim(j, s.hd, s.pairs));
    }
    EXPECT_EQ(static_cast<int>(keys.size()), s.hd) << s.hd;
    EXPECT_EQ(static_cast<int>(values.size()), s.hd) << s.hd;
    EXPECT_EQ(*keys.begin(), 0);
    EXPECT_EQ(*keys.rbegin(), s.hd - 1);
    const int half = s.hd / 2, rotated = 2 * s.pairs;
    for (int j = 0; j < s.hd; ++j) {
      const int d = kv::JoinedKeyDim(j, s.hd, s.pairs);
      // The key view's first dims are exactly the rotated ones (i and half + i, i < pairs).
      EXPECT_EQ(kv::JoinedKeyRotated(j, s.pairs), d % half < s.pairs) << s.hd << " " << j;
      // Row position j + rotated is key dim j + rotated and value dim j: one value, read by both.
      if (j + rotated < s.hd) {
        EXPECT_EQ(kv::JoinedKeyDim(j + rotated, s.hd, s.pairs), kv::JoinedValueDim(j, s.hd, s.pairs));
      }
    }
    // The value view ends with the rotated dims in the key view's order.
    for (int j = 0; j < rotated; ++j) {
      EXPECT_EQ(kv::JoinedValueDim(s.hd - rotated + j, s.hd, s.pairs), kv::JoinedKeyDim(j, s.hd, s.pairs));
    }
  }
}

// JoinedOrder builds the row the cache keeps from K and V, and one query's scores and one output are the
// plain ones: q·k over the head's dims, Σ p·v back in the head's order.
TEST(JoinedKv, OrderKeepsScoresAndOutputs) {
  for (const Shape s : kShapes) {
    const int hd = s.hd, rotated = 2 * s.pairs;
    std::vector<float> q(hd), k(hd), u(hd), w(hd);
    for (int d = 0; d < hd; ++d) {
      // Powers of two: every product and sum below is exact, so the order of additions cannot matter.
      u[d] = static_cast<float>((d % 7) - 3) / 4;
      w[d] = static_cast<float>(1 << (d % 3));
      q[d] = static_cast<float>((d % 5) - 2) / 2;
      k[d] = d % (hd / 2) < s.pairs ? static_cast<float>((d % 9) - 4) / 8 : u[d] * w[d];  // un-rotated: u·w
    }
    float plain = 0;
    for (int d = 0; d < hd; ++d) plain += q[d] * k[d];
    JoinedOrder order(hd, s.pairs);
    std::vector<float> kj = k, uj = u, qj = q;
    order.Rows(kj.data(), uj.data());
    order.Query(qj.data(), w.data());
    // The row: [key view's rotated dims | shared | value view's last `rotated`].
    std::vector<float> row(kj.begin(), kj.end());
    row.insert(row.end(), uj.end() - rotated, uj.end());
    for (int j = 0; j < hd; ++j) EXPECT_EQ(row[rotated + j], uj[j]) << hd << " " << j;
    float joined = 0;
    for (int j = 0; j < hd; ++j) joined += qj[j] * row[j];
    EXPECT_EQ(joined, plain) << hd;
    std::vector<float> out = uj;  // one key of weight 1: the output is its value
    order.Output(out.data());
    EXPECT_EQ(out, u) << hd;
  }
}

TEST(JoinedKv, CacheViewsOfOneRow) {
  for (Precision p : {Precision::kBf16, Precision::kFp32}) {
    const int64_t elem = p == Precision::kBf16 ? 2 : 4;
    LayerKvCache cache(false, 0, 64, p, 16);
    cache.Reserve(kv::kPageTokens + 1);
    EXPECT_EQ(static_cast<int64_t>(cache.bytes()), 2 * kv::kPageTokens * (64 + 16) * elem);
    for (int64_t pos : {int64_t{0}, int64_t{1}, kv::kPageTokens - 1, kv::kPageTokens}) {
      auto* k = cache.K<uint8_t>(pos);
      EXPECT_EQ(cache.V<uint8_t>(pos), k + 16 * elem) << pos;
      if (pos % kv::kPageTokens != kv::kPageTokens - 1) {
        EXPECT_EQ(cache.K<uint8_t>(pos + 1), k + (64 + 16) * elem) << pos;
      }
    }
  }
}

TEST(JoinedKv, FullLayersWithKEqVAndOneKvHeadKeepThem) {
  const std::string dir = testing_util::MakeCheckpoint("joined", testing_util::SmallModel());
  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  ModelConfig c = *config;
  ASSERT_EQ(c.layer_types[2], LayerType::kFull);
  ASSERT_EQ(c.RotaryPairs(2), 8);  // global_head_dim 64, partial rotary 0.25
  EXPECT_EQ(KvJoinedValues(c, 2), 16);
  EXPECT_EQ(KvJoinedValues(c, 0), 0);  // sliding
  EXPECT_EQ(KvBytesAtLength(c, 2, 3, Precision::kBf16, 1), kv::kPageTokens * (64 + 16) * 2);
  ModelConfig split = c;
  split.k_eq_v = false;  // a v_proj of its own: K and V differ, and the layer has num_kv_heads (2) heads
  EXPECT_EQ(KvJoinedValues(split, 2), 0);
  EXPECT_EQ(KvBytesAtLength(split, 2, 3, Precision::kBf16, 1), kv::kPageTokens * 2 * (2 * 64) * 2);
  split = c;
  split.num_global_kv_heads = 2;
  EXPECT_EQ(KvJoinedValues(split, 2), 0);
  split = c;
  split.rope_full.partial_rotary_factor = 1.0;  // every dim rotates: nothing to share
  EXPECT_EQ(KvJoinedValues(split, 2), 0);
  split = c;
  split.rope_full.partial_rotary_factor = 0.1875;  // 6 pairs: the value view would not start on 16 bytes
  EXPECT_EQ(KvJoinedValues(split, 2), 0);
}

}  // namespace
}  // namespace layerpipe
