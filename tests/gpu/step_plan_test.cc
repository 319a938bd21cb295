// Host-side planning of the CUDA backend (no device needed): cache index math against the CPU
// LayerKvCache layout, tiling, split choice and the metadata layout's stability for decode graphs.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "engine/cuda/kv_index.h"
#include "engine/cuda/step_plan.h"
#include "engine/cpu/kv_cache.h"

namespace layerpipe::cuda {
namespace {

TEST(KvIndexTest, SlotsMatchTheCpuCacheLayout) {
  const int64_t width = 8, window = 6;
  LayerKvCache ring(true, window, width, Precision::kFp32), pages(false, 0, width, Precision::kFp32);
  ring.Reserve(1);
  pages.Reserve(3 * kv::kPageTokens);
  const float* ring0 = ring.K<float>(0);
  // Page bases as the CPU allocated them, in position order.
  std::vector<const float*> page_base;
  for (int64_t p = 0; p < 3; ++p) page_base.push_back(pages.K<float>(p * kv::kPageTokens));
  for (int64_t pos : {0, 1, 5, 6, 7, 255, 256, 511, 700}) {
    const kv::Slot r = kv::SlotOf(pos, true, window);
    EXPECT_EQ(r.block, 0);
    EXPECT_EQ(ring0 + kv::RowOffset(r.slot, 0, width, true, window, 0), ring.K<float>(pos)) << pos;
    EXPECT_EQ(ring0 + kv::RowOffset(r.slot, 1, width, true, window, 0), ring.V<float>(pos)) << pos;
    const kv::Slot p = kv::SlotOf(pos, false, 0);
    EXPECT_EQ(page_base[p.block] + kv::RowOffset(p.slot, 0, width, false, 0, 0), pages.K<float>(pos)) << pos;
    EXPECT_EQ(page_base[p.block] + kv::RowOffset(p.slot, 1, width, false, 0, 0), pages.V<float>(pos)) << pos;
  }
  // A block's K rows back to back, then its V rows: a pass over keys (or values) reads memory in order.
  EXPECT_EQ(pages.K<float>(1), pages.K<float>(0) + width);
  EXPECT_EQ(pages.V<float>(0), pages.K<float>(0) + kv::kPageTokens * width);
  EXPECT_EQ(ring.V<float>(0), ring0 + window * width);
}

TEST(KvIndexTest, RingKeepsTheLastWindowRowsOfAChunk) {
  int kept = 0;
  for (int64_t i = 0; i < 20; ++i) kept += kv::CacheKeepsRow(i, 20, true, 6);
  EXPECT_EQ(kept, 6);
  EXPECT_FALSE(kv::CacheKeepsRow(13, 20, true, 6));
  EXPECT_TRUE(kv::CacheKeepsRow(14, 20, true, 6));
  EXPECT_TRUE(kv::CacheKeepsRow(0, 20, false, 0));
  EXPECT_TRUE(kv::CacheKeepsRow(0, 3, true, 6));
}

TEST(KvIndexTest, FirstVisibleKeyFollowsTheWindow) {
  EXPECT_EQ(FirstVisibleKey(0, 6), 0);
  EXPECT_EQ(FirstVisibleKey(5, 6), 0);
  EXPECT_EQ(FirstVisibleKey(6, 6), 1);  // q − k < window: 6 keys, itself included
  EXPECT_EQ(FirstVisibleKey(1000, 0), 0);
}

TEST(KvIndexTest, SplitsPartitionTheKeyRangeInWholeTiles) {
  for (int64_t lo : {0, 3, 100}) {
    for (int64_t len : {1, 31, 32, 33, 600, 4096}) {
      for (int splits : {1, 2, 7, 32}) {
        const int64_t hi = lo + len - 1;
        int64_t next = lo;
        for (int s = 0; s < splits; ++s) {
          int64_t b, e;
          SplitKeyRange(lo, hi, splits, s, kKeysPerTile, &b, &e);
          if (b >= e) {
            EXPECT_GE(b, hi + 1);
            continue;
          }
          EXPECT_EQ(b, next);
          if (e != hi + 1) EXPECT_EQ((e - b) % kKeysPerTile, 0);
          next = e;
        }
        EXPECT_EQ(next, hi + 1) << lo << " " << len << " " << splits;
      }
    }
  }
}

TEST(StepPlanTest, BlockingCoversEveryHeadOnce) {
  for (auto [heads, kv] : std::vector<std::pair<int, int>>{{16, 8}, {16, 1}, {4, 2}, {4, 1}, {32, 1}, {6, 2}}) {
    const AttentionBlocking b = BlockingFor(heads, kv);
    EXPECT_EQ(b.group, heads / kv);
    EXPECT_LE(b.heads_per_chunk * b.rows_per_tile, kQueriesPerBlock);
    EXPECT_GE(b.rows_per_tile, 1);
    std::set<int> seen;
    for (int c = 0; c < b.head_chunks; ++c) {
      for (int i = 0; i < b.heads_per_chunk; ++i) {
        const int g = c * b.heads_per_chunk + i;
        if (g < b.group) EXPECT_TRUE(seen.insert(g).second);
      }
    }
    EXPECT_EQ(static_cast<int>(seen.size()), b.group);
  }
}

TEST(StepPlanTest, TilesCoverEveryRowOnce) {
  std::vector<SliceMeta> slices = {{0, 9, 0}, {40, 1, 9}, {3, 17, 10}};
  for (int rpt : {1, 2, 8, 16}) {
    const auto tiles = MakeTiles(slices, rpt);
    std::vector<int> covered(27, 0);
    for (const TileMeta& t : tiles) {
      const SliceMeta& s = slices[t.slice];
      for (int r = t.row_begin; r < std::min(t.row_begin + rpt, s.n); ++r) ++covered[s.row0 + r];
    }
    for (int c : covered) EXPECT_EQ(c, 1);
  }
}

TEST(StepPlanTest, SkippedSlicesGetNoTiles) {
  std::vector<SliceMeta> slices = {{0, 9, 0}, {40, 100, 9}, {3, 17, 109}};
  const auto tiles = MakeTiles(slices, 4, {false, true, false});
  for (const TileMeta& t : tiles) EXPECT_NE(t.slice, 1);
  EXPECT_EQ(tiles.size(), 3u + 5u);
}

TEST(StepPlanTest, GemmQueryBlocksCoverEveryRowAndEveryKeyItSees) {
  for (int64_t window : {0, 6, 1024}) {
    for (int64_t pos0 : {0, 5, 700, 5000}) {
      for (int32_t n : {64, 65, 600, 4096}) {
        for (int64_t budget : {int64_t{1} << 14, int64_t{64} << 20, int64_t{1} << 40}) {
          const int heads = 16;
          const SliceMeta s{pos0, n, 0};
          const auto blocks = PlanGemmQueryBlocks(s, window, heads, budget);
          int64_t next_row = 0;
          for (const GemmQueryBlock& b : blocks) {
            SCOPED_TRACE(::testing::Message() << "window " << window << " pos0 " << pos0 << " n " << n << " budget "
                                              << budget << " block at " << b.row_begin);
            EXPECT_EQ(b.row_begin, next_row);
            next_row += b.rows;
            EXPECT_GT(b.rows, 0);
            EXPECT_GE(b.rows_pad, b.rows);
            EXPECT_EQ(b.rows_pad % kGemmAttentionRowAlign, 0);
            EXPECT_GE(b.keys_pad, b.keys);
            EXPECT_EQ(b.keys_pad % kGemmAttentionKeyAlign, 0);
            // The last row's own key ends the range; every row's first visible key is inside it.
            EXPECT_EQ(b.key_begin + b.keys - 1, pos0 + b.row_begin + b.rows - 1);
            for (int64_t r = b.row_begin; r < b.row_begin + b.rows; ++r) {
              EXPECT_GE(FirstVisibleKey(pos0 + r, window), b.key_begin);
            }
            EXPECT_EQ(b.key_begin, FirstVisibleKey(pos0 + b.row_begin, window));
            // Within budget unless already at the smallest block.
            if (b.rows_pad > kGemmAttentionRowAlign) EXPECT_LE(8 * heads * b.rows_pad * b.keys_pad, budget);
          }
          EXPECT_EQ(next_row, n);
        }
      }
    }
  }
}

TEST(StepPlanTest, GemmQueryBlocksOfAWindowedSliceAreSizedByTheWindowNotTheSlice) {
  // 32k rows, window 1024, 16 heads, 256 MiB: a block of r rows sees r + 1023 keys, so r = 1024 fits
  // (8 · 16 · 1024 · 2048 bytes) where sizing by the slice's whole span would allow 64.
  const auto blocks = PlanGemmQueryBlocks({0, 32768, 0}, 1024, 16, int64_t{256} << 20);
  ASSERT_FALSE(blocks.empty());
  EXPECT_EQ(blocks.front().rows, 1024);
  EXPECT_EQ(blocks.size(), 32u);
  // Full attention over the same slice is sized by its last row's keys.
  const auto full = PlanGemmQueryBlocks({0, 32768, 0}, 0, 16, int64_t{256} << 20);
  EXPECT_EQ(full.front().rows, 64);
}

TEST(StepPlanTest, GemmQueryBlocksReachTheEndOfTheirRowsImageBlocks) {
  // 200 rows at 1000, window 6, an image block over rows [50, 130): its rows see up to row 129.
  const SliceMeta s{1000, 200, 0};
  std::vector<int64_t> last(200);
  for (int64_t r = 0; r < 200; ++r) last[r] = r >= 50 && r < 130 ? 1000 + 129 : 1000 + r;
  for (int64_t budget : {int64_t{1} << 14, int64_t{1} << 20, int64_t{1} << 40}) {
    const auto blocks = PlanGemmQueryBlocks(s, 6, 4, budget, last.data());
    int64_t next_row = 0;
    for (const GemmQueryBlock& b : blocks) {
      SCOPED_TRACE(::testing::Message() << "budget " << budget << " block at " << b.row_begin);
      EXPECT_EQ(b.row_begin, next_row);
      next_row += b.rows;
      EXPECT_EQ(b.key_begin, FirstVisibleKey(1000 + b.row_begin, 6));
      EXPECT_EQ(b.key_begin + b.keys - 1, last[b.row_begin + b.rows - 1]);
      EXPECT_GE(b.keys_pad, b.keys);
      if (b.rows_pad > kGemmAttentionRowAlign) EXPECT_LE(8 * 4 * b.rows_pad * b.keys_pad, budget);
    }
    EXPECT_EQ(next_row, 200);
  }
}

TEST(StepPlanTest, LastKeysTakeASectionOnlyWhenThereAreImageBlocks) {
  const StepLayout text = LayoutFor(2, 40, 5, 10, 3, 16, 32, 10);
  const StepLayout image = LayoutFor(2, 40, 5, 10, 3, 16, 32, 10, true);
  EXPECT_EQ(text.ptrs, text.last_key);
  EXPECT_GE(image.ptrs, image.last_key + 40 * sizeof(int64_t));
  EXPECT_EQ(image.last_key % 16, 0u);
  EXPECT_EQ(image.cs_full, text.cs_full);
}

TEST(KvIndexTest, LastVisibleKeyIsThePositionWithoutImageBlocks) {
  const int64_t last[3] = {7, 9, 9};
  EXPECT_EQ(LastVisibleKey(nullptr, 2, 42), 42);
  EXPECT_EQ(LastVisibleKey(last, 1, 8), 9);
}

TEST(StepPlanTest, SplitsDependOnTheLaunchNotTheContext) {
  EXPECT_EQ(ChooseSplits(10000, 1 << 20, 132), 1);               // prefill: enough blocks
  EXPECT_EQ(ChooseSplits(1, 1 << 20, 132), kMaxSplits);          // one long decode
  EXPECT_EQ(ChooseSplits(8, 1031, 132), (1031 + 127) / 128);     // a window caps the pieces
  EXPECT_EQ(ChooseSplits(64, 1 << 20, 132), (2 * 132 + 63) / 64);
}

TEST(StepPlanTest, LayoutIsStableAsPageTablesGrow) {
  const StepLayout a = LayoutFor(3, 3, 3, 3, 5, 16, 32, 10);
  const StepLayout b = LayoutFor(3, 3, 3, 3, 5, 16, 32, 1000);
  EXPECT_EQ(a.slices, b.slices);
  EXPECT_EQ(a.cs_full, b.cs_full);
  EXPECT_EQ(a.ptrs, b.ptrs);
  EXPECT_GT(b.total, a.total);
  EXPECT_GE(a.row_slice, a.slices + 3 * sizeof(SliceMeta));
  EXPECT_GE(a.ptrs, a.cs_full + 3 * 2 * 32 * sizeof(float));
  for (size_t off : {a.slices, a.row_slice, a.tiles_sliding, a.tiles_full, a.kv_offset, a.cs_sliding, a.cs_full, a.ptrs}) {
    EXPECT_EQ(off % 16, 0u);
  }
}

}  // namespace
}  // namespace layerpipe::cuda
