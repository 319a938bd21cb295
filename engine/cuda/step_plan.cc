#include "engine/cuda/step_plan.h"

#include <algorithm>

#include "engine/cuda/kv_index.h"

namespace layerpipe::cuda {
namespace {

// Split pieces shorter than this many key tiles cost more in the reduce than they win in parallelism.
constexpr int64_t kMinTilesPerSplit = 4;

size_t Align16(size_t x) { return (x + 15) / 16 * 16; }

}  // namespace

AttentionBlocking BlockingFor(int heads, int kv_heads) {
  AttentionBlocking b;
  b.group = heads / kv_heads;
  b.heads_per_chunk = std::min(b.group, kQueriesPerBlock);
  b.head_chunks = (b.group + b.heads_per_chunk - 1) / b.heads_per_chunk;
  b.rows_per_tile = kQueriesPerBlock / b.heads_per_chunk;
  return b;
}

std::vector<TileMeta> MakeTiles(const std::vector<SliceMeta>& slices, int rows_per_tile,
                                const std::vector<bool>& skip) {
  std::vector<TileMeta> tiles;
  for (size_t s = 0; s < slices.size(); ++s) {
    if (s < skip.size() && skip[s]) continue;
    for (int32_t r = 0; r < slices[s].n; r += rows_per_tile) tiles.push_back({static_cast<int32_t>(s), r});
  }
  return tiles;
}

int ChooseSplits(int64_t blocks, int64_t max_keys, int sm_count) {
  if (blocks <= 0) return 1;
  const int64_t for_sms = (2 * int64_t{sm_count} + blocks - 1) / blocks;
  const int64_t piece = kMinTilesPerSplit * kKeysPerTile;
  const int64_t for_keys = std::max<int64_t>(1, (max_keys + piece - 1) / piece);
  return static_cast<int>(std::clamp<int64_t>(std::min(for_sms, for_keys), 1, kMaxSplits));
}

std::vector<GemmQueryBlock> PlanGemmQueryBlocks(const SliceMeta& s, int64_t window, int heads,
                                                int64_t budget_bytes, const int64_t* last_key) {
  auto round_up = [](int64_t x, int64_t a) { return (x + a - 1) / a * a; };
  auto last_of = [&](int64_t r) { return LastVisibleKey(last_key, r, s.pos0 + r); };
  // How far past its own position a row sees at most (the rest of its image block).
  int64_t reach = 0;
  for (int64_t r = 0; last_key != nullptr && r < s.n; ++r) reach = std::max(reach, last_of(r) - (s.pos0 + r));
  // The widest key range a block of `r` rows can have: the whole slice's keys with full attention, at
  // most r + window - 1 (+ reach) with a window.
  const int64_t span = s.pos0 + s.n - FirstVisibleKey(s.pos0, window);
  auto keys_for = [&](int64_t r) {
    return round_up(window > 0 ? std::min(span, r + window - 1 + reach) : span, kGemmAttentionKeyAlign);
  };
  auto fits = [&](int64_t r) { return 8 * int64_t{heads} * r * keys_for(r) <= budget_bytes; };
  // The most rows (a multiple of the alignment) that fit, by bisection: the cost grows with the rows.
  int64_t lo = 1, hi = round_up(s.n, kGemmAttentionRowAlign) / kGemmAttentionRowAlign;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (fits(mid * kGemmAttentionRowAlign)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int64_t rows = lo * kGemmAttentionRowAlign;
  std::vector<GemmQueryBlock> blocks;
  for (int64_t r0 = 0; r0 < s.n; r0 += rows) {
    GemmQueryBlock b;
    b.row_begin = r0;
    b.rows = std::min<int64_t>(rows, s.n - r0);
    b.rows_pad = round_up(b.rows, kGemmAttentionRowAlign);
    b.key_begin = FirstVisibleKey(s.pos0 + r0, window);
    // Rows' last keys never decrease, so the block's last row sees furthest.
    b.keys = last_of(r0 + b.rows - 1) + 1 - b.key_begin;
    b.keys_pad = round_up(b.keys, kGemmAttentionKeyAlign);
    blocks.push_back(b);
  }
  return blocks;
}

StepLayout LayoutFor(int num_slices, int64_t rows, size_t tiles_sliding, size_t tiles_full, int local_layers,
                     int pairs_sliding, int pairs_full, size_t num_ptrs, bool last_keys) {
  StepLayout l;
  size_t at = 0;
  auto section = [&at](size_t bytes) {
    const size_t start = at;
    at = Align16(at + bytes);
    return start;
  };
  l.slices = section(sizeof(SliceMeta) * num_slices);
  l.row_slice = section(sizeof(int32_t) * rows);
  l.tiles_sliding = section(sizeof(TileMeta) * tiles_sliding);
  l.tiles_full = section(sizeof(TileMeta) * tiles_full);
  l.kv_offset = section(sizeof(int32_t) * local_layers * num_slices);
  l.cs_sliding = section(sizeof(float) * rows * 2 * pairs_sliding);
  l.cs_full = section(sizeof(float) * rows * 2 * pairs_full);
  l.last_key = section(last_keys ? sizeof(int64_t) * rows : 0);
  l.ptrs = section(sizeof(uint64_t) * num_ptrs);
  l.total = at;
  return l;
}

}  // namespace layerpipe::cuda
