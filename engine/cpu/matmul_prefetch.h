// Software prefetch of the weight block a blocked matmul reads next (matmul_pair_kernel.h,
// matmul_avx2.cc): a line per step of the present block's arithmetic, so the next block arrives from
// DRAM while this one computes. Many lines at once cost more than they save: each outstanding line
// holds a fill buffer that the tiles' x loads from L2 also need (a former packing kernel, with 64-row
// passes, ran its arithmetic ~10 % slower at 12 lines per call), and Zen 4+ drops a prefetch that finds
// no free miss buffer. The hint is T0: on a 2-core Zen 5 VM (paired calls with a peak loop between,
// weights from DRAM) T1 left every kernel slower, by 3-5 points of its peak at 64 rows (AVX-512 BF16
// 73.5-79.5 -> 77.5-83.1 %, AVX-512F 83.2-85.9 -> 88.0-88.8 %, AVX2 88.7 -> 91.4 %) and 1-4 at 256-512.
#ifndef LAYERPIPE_ENGINE_CPU_MATMUL_PREFETCH_H_
#define LAYERPIPE_ENGINE_CPU_MATMUL_PREFETCH_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "engine/cpu/matmul_kernels.h"

namespace layerpipe::matmul_internal {

// Prefetch a step at a time, `inc` bytes on each step, over ranges of `bytes`, `stride` apart
// (after the last range it goes on into whatever follows: a prefetch cannot fault).
struct LineWalk {
  const char* row;
  int64_t offset;
  int64_t bytes;
  int64_t stride;
  int64_t inc;
  __attribute__((always_inline)) inline void Step() {
    _mm_prefetch(row + offset, _MM_HINT_T0);
    offset += inc;
    if (offset >= bytes) {
      offset -= bytes;
      row += stride;
    }
  }
};

// The bytes the block after (group j, pairs [c0, c1)) reads: the group's next pairs, else the next
// group's first ones. `rows` ranges of `bytes`, `stride` apart (tiled: one contiguous range).
struct NextBlock {
  const char* begin = nullptr;
  int64_t rows = 0, stride = 0, bytes = 1;
};

inline NextBlock NextBlockOf(const PairProblem& p, int64_t j, int64_t cols, int64_t c1, int64_t chunk, int64_t j_end) {
  ChunkAt next;
  if (!ChunkAfter(p, j, cols, c1, chunk, j_end, &next)) return NextBlock{};
  if (p.w_tiled) {
    NextBlock block{nullptr, 1, 0, 0};
    block.begin = TiledChunk(p, next, &block.bytes);
    return block;
  }
  return NextBlock{reinterpret_cast<const char*>(p.w + next.j * p.k + 2 * next.p0), GroupCols(p, next.j, j_end), p.k * 2,
                   next.pairs * 4};
}

// Row tile `t` of `tiles` prefetches its share of the next block, a step per pair of its `steps`, so
// the next block's weights arrive from DRAM while this block computes. It covers its share in
// the first half of its steps and walks on over the next tile's in the second, so that each line is
// asked for twice, half a tile apart (the last tile walks on into the block after): a prefetch
// that finds no free miss buffer is dropped, and with few row tiles a block's lines are asked for at
// a high rate. At 64 rows on a 2-core Zen 5 VM, alternating calls, 2-5 % faster; 256-512 rows
// unchanged. Where there is no next block it walks in place over `here` (already cached).
inline LineWalk TileWalk(const NextBlock& next, int64_t t, int64_t tiles, int64_t steps, const void* here) {
  const int64_t total = next.rows * next.bytes;
  if (total == 0) return LineWalk{static_cast<const char*>(here), 0, 1, 0, 0};
  const int64_t share = (total + tiles - 1) / tiles, start = std::min(t * share, total - 1);
  const int64_t half = std::max<int64_t>(1, steps / 2);
  return LineWalk{next.begin + start / next.bytes * next.stride, start % next.bytes, next.bytes, next.stride,
                  std::max<int64_t>(1, (share + half - 1) / half)};
}

}  // namespace layerpipe::matmul_internal

#endif  // LAYERPIPE_ENGINE_CPU_MATMUL_PREFETCH_H_
