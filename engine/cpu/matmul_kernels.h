// Internal interface between the matmul front end (matmul.cc: dispatch, activation preparation,
// threading) and the per-ISA kernels (matmul_avx2.cc, matmul_avx512f.cc, matmul_avx512.cc). Each kernel
// computes a range of output columns for all rows; the front end gives every thread a disjoint column
// range.
#ifndef LAYERPIPE_ENGINE_CPU_MATMUL_KERNELS_H_
#define LAYERPIPE_ENGINE_CPU_MATMUL_KERNELS_H_

#include <algorithm>
#include <cstdint>

#include "engine/cpu/thread_scratch.h"
#include "engine/model/tiled_rows.h"

namespace layerpipe::matmul_internal {

constexpr int64_t RoundUp(int64_t v, int64_t multiple) { return (v + multiple - 1) / multiple * multiple; }
// The length of each of the fewest equal parts of `total` that are at most `most` long, rounded up to
// a multiple of `multiple` (the last part takes what is left).
constexpr int64_t EqualPart(int64_t total, int64_t most, int64_t multiple) {
  const int64_t parts = (total + most - 1) / most;
  return RoundUp((total + parts - 1) / parts, multiple);
}

// The kernels' per-thread scratch buffers (thread_scratch.h), one per use.
enum class Slot { kActivations, kPackedWeights, kWidenedWeights, kPartialSums };
using layerpipe::ThreadScratch;

// Decode on row-major weights reads them in place, a tile's columns one weight row each. Taken from
// `segments` equal parts of a thread's columns (the t-th tile reads row t of each part), a tile's rows
// continue where the previous tile's ended: that many long sequential streams instead of the same
// number of short ones restarting at every tile, which the hardware prefetchers follow much better.
// On a 2-core Zen 5 VM, m = 1, against a plain read of the same bytes: the former AVX2-order kernel
// 59-87 % tile by tile, 85-104 % segmented (42-61 -> 76-85 GB/s). Calls
// tile(j, step, cols) for every tile of columns j, j + step, .. (cols of them); the columns past the
// whole parts go in tiles of adjacent ones.
template <typename TileFn>
void ForSegmentedTiles(int64_t j_begin, int64_t j_end, int segments, TileFn&& tile) {
  const int64_t part = (j_end - j_begin) / segments;
  for (int64_t t = 0; t < part; ++t) tile(j_begin + t, part, segments);
  for (int64_t j = j_begin + part * segments; j < j_end; j += segments) tile(j, 1, std::min<int64_t>(segments, j_end - j));
}
// The kernels read the weights as pairs of k (the order engine/model/tiled_rows.h stores), an fp32
// lane per output column; x rows are padded with zeros to a multiple of kPairXPad values.
//  - AVX-512 BF16 order: output (i, j) is one lane's chain over the pairs of k in increasing order,
//    acc = vdpbf16ps(acc, x[i][2p, 2p + 1], w[j][2p, 2p + 1]) from +0, with no sum across lanes; an odd
//    k's last pair is (value, 0).
//  - Column order (AVX2 and AVX-512F, fp32 x): output (i, j) is one lane's chain of fused multiply-adds
//    over k in increasing order, acc = fma(x[i][q], w[j][q], acc) from +0: the order of a scalar loop,
//    whatever the vector width. An odd k's last pair adds one more +0 · +0, which can only turn a sum
//    of -0 into +0.
constexpr int64_t kPairXPad = 32;

struct PairProblem {
  const void* x;       // m rows of ldx values (bf16 bits or fp32); columns [k, RoundUp(k, kPairXPad)) zero
  int64_t ldx;
  int64_t m;
  int64_t k;
  const uint16_t* w;   // n rows of k bf16 values, row-major or tiled
  bool w_tiled;        // engine/model/tiled_rows.h; then k is even
  // The fp32 kernels' prefill widens each chunk of weights once into an fp32 block rather than in
  // registers for every row tile (MatmulWidening::kBlock). Same bits either way.
  bool widen_block;
  int64_t n;
  float* y;
};

inline int64_t Pairs(const PairProblem& p) { return (p.k + 1) / 2; }

// The columns of [j, j_end) that one group covers (tiled: the rest of the group j falls in).
inline int64_t GroupCols(const PairProblem& p, int64_t j, int64_t j_end) {
  if (!p.w_tiled) return std::min<int64_t>(kTileRows, j_end - j);
  const int64_t g0 = j / kTileRows * kTileRows;
  return std::min(g0 + TileGroupRows(g0, p.n), j_end) - j;
}

// Tiled weights: the pair p0 of column j (32 bits), its group's next pair `*stride` lanes on.
inline const uint32_t* TiledPairs(const PairProblem& p, int64_t j, int64_t p0, int64_t* stride) {
  const int64_t g0 = j / kTileRows * kTileRows;
  *stride = TileGroupRows(g0, p.n);
  return reinterpret_cast<const uint32_t*>(p.w + g0 * p.k) + p0 * *stride + (j - g0);
}

// Where a column loop that takes group j's pairs in chunks of `chunk` goes after [.., c1): the group's
// next pairs, else the next group's first ones (none past j_end: returns false). Its kernels prefetch
// that chunk while they compute this one.
struct ChunkAt {
  int64_t j, p0, pairs;
};
inline bool ChunkAfter(const PairProblem& p, int64_t j, int64_t cols, int64_t c1, int64_t chunk, int64_t j_end,
                       ChunkAt* next) {
  const int64_t pairs = Pairs(p);
  next->j = c1 < pairs ? j : j + cols;
  next->p0 = c1 < pairs ? c1 : 0;
  next->pairs = std::min(next->p0 + chunk, pairs) - next->p0;
  return next->j < j_end;
}

// Tiled weights: a chunk's pairs of its whole group (whichever of its columns a thread reads), one
// range of *bytes.
inline const char* TiledChunk(const PairProblem& p, const ChunkAt& c, int64_t* bytes) {
  int64_t stride = 0;
  const uint32_t* at = TiledPairs(p, c.j / kTileRows * kTileRows, c.p0, &stride);
  *bytes = c.pairs * stride * 4;
  return reinterpret_cast<const char*>(at);
}

// fn(i_begin, i_end) for the rows of x in equal passes of at most most_rows rows and most_bytes of x
// (rows of row_bytes), a multiple of `multiple` each but the last: the passes over all the weights that
// keep a pass's x in L3 while every column group reads it again.
template <typename Fn>
void ForRowPasses(int64_t m, int64_t row_bytes, int64_t most_bytes, int64_t most_rows, int64_t multiple, Fn&& fn) {
  const int64_t rows = EqualPart(m, std::clamp<int64_t>(most_bytes / row_bytes, multiple, most_rows), multiple);
  for (int64_t i = 0; i < m; i += rows) fn(i, std::min(m, i + rows));
}

// Whether decode prefetches its tiled weights far ahead into L2 and from there into L1 near ahead:
// on Intel cores, whose hardware prefetchers left the AVX-512 two-group decode short of the read
// bandwidth (matmul_pair_kernel.h's Prefetch, matmul_avx2.cc's PrefetchAhead). AMD Zen keeps the
// former rule: the two-group decode without software prefetch (Zen's was slowed by it), other decode
// tiles into L1 (the pair not measured there).
bool DecodePrefetchesToL2();
// Whether the AVX2 kernel's second row tile walks the next chunk into cache when there are only two
// (3-4 rows: decode of a small batch): on Intel cores, where the first otherwise streams the chunk from
// DRAM alone and the second then computes with no read under way (AMD Zen was slowed by the walk).
bool SecondRowTileWalksNextChunk();

// Compute y[:, j_begin:j_end): x bf16 in the AVX-512 BF16 order (only where the CPU supports AVX-512
// BF16), x fp32 in the column order (on AVX2 registers, or where the CPU supports AVX-512 F, BW and VL
// on AVX-512 ones: the same bits).
void Avx2Columns(const PairProblem& p, int64_t j_begin, int64_t j_end);
void Avx512Bf16Columns(const PairProblem& p, int64_t j_begin, int64_t j_end);
void Avx512FColumns(const PairProblem& p, int64_t j_begin, int64_t j_end);

}  // namespace layerpipe::matmul_internal

#endif  // LAYERPIPE_ENGINE_CPU_MATMUL_KERNELS_H_
