// AVX2/FMA matmul kernels. Both paths below run the same per-(row, column) arithmetic (see
// kAvx2KStep), so the row count only changes speed, never bits:
//  - streaming (decode and short prefill chunks): weights are read straight from memory and widened
//    bf16 -> fp32 in registers; each weight row comes from DRAM once and from cache for the other
//    row tiles;
//  - blocked (long prefill chunks): a block of weight columns x k range is widened once into a packed
//    fp32 buffer that every row tile reuses; partial sums are parked per lane between k blocks.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "engine/cpu/avx2_sum.h"
#include "engine/cpu/matmul_kernels.h"
#include "engine/cpu/matmul_prefetch.h"
#include "engine/cpu/tile_table.h"
#include "engine/model/bf16.h"

namespace layerpipe::matmul_internal {
namespace {

// Micro-tile: kRows rows x kCols columns -> 12 accumulators + 3 weight vectors + 1 x vector = 16 ymm.
constexpr int kRows = 4;
constexpr int kCols = 3;
// Up to this many rows, and while x fits in an L2, the streaming path is as fast or faster (measured on
// Zen 4: re-widening a cache-hot weight tile per row tile is cheap); beyond either, packing plus k
// blocking wins. Streamed from L3, x is the bottleneck: down_proj (k = 15360) at 64 rows (3.8 MiB of
// x) ran 15 % faster blocked on a 2-core Zen 5 VM, q_proj at 64 rows (0.9 MiB) 2-5 % slower.
constexpr int64_t kStreamMaxRows = 64;
constexpr int64_t kStreamMaxXBytes = int64_t{1} << 20;
// On AVX-512F registers (matmul_avx512f.cc) streaming with 8-row tiles is as fast up to 16 rows, and
// up to 32 while x fits in an L2; packing pays from fewer rows on than here. On a 2-core Zen 5 VM,
// alternating calls: q_proj at 24 and 32 rows (360-480 KiB of x) 8-25 % faster streamed, 48 and 64
// rows 8-15 % slower; down_proj at 24 rows (1.4 MiB) as fast, at 32 rows 12 % slower.
constexpr int64_t kWideStreamMaxRows = 16;
constexpr int64_t kWideStreamMaxL2Rows = 32;
// Blocked path: kBlockCols weight columns x kBlockK values of k are packed (fp32, 192 KiB: L2) per
// block; the x tile (4 rows x kBlockK) stays in L1. Larger blocks measured no better.
constexpr int64_t kBlockCols = 48;
constexpr int64_t kBlockK = 1024;
// Rows are taken at most kBlockRows and at most kSuperBytes of x at a time (273 rows at k = 3840, 68 at
// 15360), so their x and parked partial sums stay in L3 while every column block passes over them;
// with all rows of a long prefill chunk at once both would come from DRAM for every column block, and
// 512 rows of x (7.5 MiB at k = 3840) held q/k/o/gate 2-core Zen 5 GEMMs at 72-78 % of the FMA peak
// (80-84 % at 4 MiB), at the cost of widening each weight block once per pass.
constexpr int64_t kBlockRows = 512;
constexpr int64_t kSuperBytes = int64_t{4} << 20;

inline __m256 WidenBf16(const uint16_t* p) { return Bf16x8ToF32(p); }

// Weight sources: Load(c, q) returns w[col c][q .. q+8) as fp32. Sources read straight from the
// (mmapped) weights also prefetch: the hardware prefetcher alone leaves a core well short of its
// share of DRAM bandwidth once there is arithmetic between the loads.
struct Bf16Rows {
  static constexpr bool kPrefetch = true;
  const uint16_t* w;
  int64_t ld;
  __m256 Load(int c, int64_t q) const { return WidenBf16(w + c * ld + q); }
  void Prefetch(int c, int64_t q) const {
    _mm_prefetch(reinterpret_cast<const char*>(w + c * ld + q) + kRowPrefetchBytes, _MM_HINT_T0);
  }
};
struct F32Rows {
  static constexpr bool kPrefetch = true;
  const float* w;
  int64_t ld;
  __m256 Load(int c, int64_t q) const { return _mm256_loadu_ps(w + c * ld + q); }
  void Prefetch(int c, int64_t q) const {
    _mm_prefetch(reinterpret_cast<const char*>(w + c * ld + q) + kRowPrefetchBytes, _MM_HINT_T0);
  }
};
// Packed tile of C columns: for each step of 8 values, C vectors back to back; q is relative to the
// start of the packed k range. Cache-resident by construction.
template <int C>
struct PackedCols {
  static constexpr bool kPrefetch = false;
  const float* w;
  __m256 Load(int c, int64_t q) const { return _mm256_load_ps(w + q * C + c * 8); }
  void Prefetch(int, int64_t) const {}
};

// acc[r][c] += x[r][q..] * w[c][q..] over q in [q_begin, q_end) (multiples of 8), in increasing q.
// x_q_offset maps the weight source's q to x's column (they differ for the packed source).
template <int R, int C, typename W>
inline void Accumulate(const float* x, int64_t ldx, int64_t x_q_offset, const W& w, int64_t q_begin,
                       int64_t q_end, __m256 (&acc)[R][C]) {
  auto step = [&](int64_t q) __attribute__((always_inline)) {
    __m256 wv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) wv[c] = w.Load(c, q);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * ldx + x_q_offset + q);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  };
  int64_t q = q_begin;
  if constexpr (W::kPrefetch) {
    // One prefetch per weight row per 64-byte line of bf16.
    for (; q + 4 * kAvx2KStep <= q_end; q += 4 * kAvx2KStep) {
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) w.Prefetch(c, q);
      step(q);
      step(q + kAvx2KStep);
      step(q + 2 * kAvx2KStep);
      step(q + 3 * kAvx2KStep);
    }
  }
  for (; q < q_end; q += kAvx2KStep) step(q);
}

template <int R, int C>
inline void ZeroAcc(__m256 (&acc)[R][C]) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
}

// y[r * ldy + c * step] for the tile's rows r and columns c.
template <int R, int C>
inline void StoreSums(const __m256 (&acc)[R][C], float* y, int64_t ldy, int64_t step = 1) {
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) y[r * ldy + c * step] = HorizontalSum(acc[r][c]);
}

// Streaming path: whole k per tile, weights read in place; the tile's columns are j, j + step, ...
template <int R, int C>
void StreamTile(const Avx2Problem& p, int64_t i, int64_t j, int64_t step) {
  __m256 acc[R][C];
  ZeroAcc(acc);
  const float* x = p.x + i * p.ldx;
  const int64_t k_full = p.k / kAvx2KStep * kAvx2KStep;
  if (p.w_is_bf16) {
    Accumulate(x, p.ldx, 0, Bf16Rows{static_cast<const uint16_t*>(p.w) + j * p.k, step * p.k}, 0, k_full, acc);
  } else {
    Accumulate(x, p.ldx, 0, F32Rows{static_cast<const float*>(p.w) + j * p.k, step * p.k}, 0, k_full, acc);
  }
  if (k_full < p.k) {  // ragged end of k: zero-padded copy, matching x's zero padding
    alignas(32) float packed[kAvx2KStep * C];
    PackColumns(p, j, C, C, k_full, kAvx2KStep, packed, step);
    Accumulate(x, p.ldx, k_full, PackedCols<C>{packed}, 0, kAvx2KStep, acc);
  }
  StoreSums(acc, p.y + i * p.n + j, p.n, step);
}

// Blocked path: one k block of one tile against packed weights; partial sums live in `park`
// (one 8-float vector per (row, column) of the tile, row stride park_ld vectors).
// The loops over the accumulators are unrolled: left rolled, GCC copied them to and from `park`
// through the stack in 16-byte halves, and the 32-byte reloads missed store forwarding (on a 2-core
// Zen 5 VM, alternating calls at 512 rows: down_proj 5 % and q_proj 1 % slower).
template <int R, int C>
void BlockTile(const Avx2Problem& p, int64_t i, int64_t j, int64_t q0, int64_t len, const float* packed,
               float* park, int64_t park_ld, bool first, bool last) {
  __m256 acc[R][C];
  if (first) {
    ZeroAcc(acc);
  } else {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_load_ps(park + (r * park_ld + c) * 8);
  }
  Accumulate(p.x + i * p.ldx, p.ldx, q0, PackedCols<C>{packed}, 0, len, acc);
  if (last) {
    StoreSums(acc, p.y + i * p.n + j, p.n);
  } else {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) _mm256_store_ps(park + (r * park_ld + c) * 8, acc[r][c]);
  }
}

using StreamFn = void (*)(const Avx2Problem&, int64_t, int64_t, int64_t);
using BlockFn = void (*)(const Avx2Problem&, int64_t, int64_t, int64_t, int64_t, const float*, float*,
                         int64_t, bool, bool);

template <int R, int C>
struct StreamEntry {
  static constexpr StreamFn kFn = &StreamTile<R, C>;
};
template <int R, int C>
struct BlockEntry {
  static constexpr BlockFn kFn = &BlockTile<R, C>;
};
constexpr auto kStreamTiles = TileTable<StreamEntry, kRows, kCols>();
constexpr auto kBlockTiles = TileTable<BlockEntry, kRows, kCols>();

void StreamColumns(const Avx2Problem& p, int64_t j_begin, int64_t j_end) {
  ForSegmentedTiles(j_begin, j_end, kCols, [&p](int64_t j, int64_t step, int64_t cols) {
    for (int64_t i = 0; i < p.m; i += kRows) {
      const int64_t rows = std::min<int64_t>(kRows, p.m - i);
      kStreamTiles[rows - 1][cols - 1](p, i, j, step);
    }
  });
}

void BlockedRows(const Avx2Problem& p, int64_t i_begin, int64_t i_end, int64_t j_begin, int64_t j_end) {
  const int64_t kp = RoundUp(p.k, kAvx2KStep);
  float* packed = ThreadScratch<float, Slot::kPackedWeights>(kBlockCols * std::min(kBlockK, kp));
  float* park =
      kp > kBlockK ? ThreadScratch<float, Slot::kPartialSums>((i_end - i_begin) * kBlockCols * 8) : nullptr;

  for (int64_t jc = j_begin; jc < j_end; jc += kBlockCols) {
    const int64_t nc = std::min(kBlockCols, j_end - jc);
    for (int64_t q0 = 0; q0 < kp; q0 += kBlockK) {
      const int64_t len = std::min(kBlockK, kp - q0);
      const bool first = q0 == 0, last = q0 + len >= kp;
      // The tile of columns [t, t + kCols) is packed at packed + t * len (a last partial tile narrower).
      for (int64_t t = 0; t < nc; t += kCols) {
        const int64_t cols = std::min<int64_t>(kCols, nc - t);
        PackColumns(p, jc + t, cols, cols, q0, len, packed + t * len);
      }
      const int64_t tile_calls = (i_end - i_begin + kRows - 1) / kRows * ((nc + kCols - 1) / kCols);
      NextBlockPrefetch prefetch(p, jc, j_end, kBlockCols, q0, kBlockK, tile_calls);
      for (int64_t i = i_begin; i < i_end; i += kRows) {
        const int64_t rows = std::min<int64_t>(kRows, i_end - i);
        for (int64_t t = 0; t < nc; t += kCols) {
          const int64_t cols = std::min<int64_t>(kCols, nc - t);
          prefetch.Step();
          kBlockTiles[rows - 1][cols - 1](p, i, jc + t, q0, len, packed + t * len,
                                          park ? park + ((i - i_begin) * kBlockCols + t) * 8 : nullptr,
                                          kBlockCols, first, last);
        }
      }
    }
  }
}

void BlockedColumns(const Avx2Problem& p, int64_t j_begin, int64_t j_end) {
  const int64_t row_bytes = RoundUp(p.k, kAvx2KStep) * static_cast<int64_t>(sizeof(float));
  const int64_t rows = std::clamp<int64_t>(kSuperBytes / row_bytes / kRows * kRows, kRows, kBlockRows);
  for (int64_t i = 0; i < p.m; i += rows) BlockedRows(p, i, std::min(p.m, i + rows), j_begin, j_end);
}

}  // namespace

void PackColumns(const Avx2Problem& p, int64_t j, int64_t cols, int64_t stride, int64_t q0, int64_t len, float* out,
                 int64_t step) {
  const int64_t full_end = std::clamp(p.k / kAvx2KStep * kAvx2KStep, q0, q0 + len);
  for (int64_t c = 0; c < stride; ++c) {
    float* dst = out + c * kAvx2KStep;
    if (c >= cols) {
      for (int64_t q = 0; q < len; q += kAvx2KStep) std::memset(dst + q * stride, 0, kAvx2KStep * sizeof(float));
      continue;
    }
    const int64_t row = (j + c * step) * p.k;
    int64_t q = q0;
    if (p.w_is_bf16) {
      const uint16_t* w = static_cast<const uint16_t*>(p.w) + row;
      for (; q < full_end; q += kAvx2KStep) _mm256_store_ps(dst + (q - q0) * stride, WidenBf16(w + q));
    } else {
      const float* w = static_cast<const float*>(p.w) + row;
      for (; q < full_end; q += kAvx2KStep) _mm256_store_ps(dst + (q - q0) * stride, _mm256_loadu_ps(w + q));
    }
    for (; q < q0 + len; q += kAvx2KStep) {  // ragged end of k: zero padding, matching x
      alignas(32) float tail[kAvx2KStep] = {};
      for (int64_t e = 0; e < kAvx2KStep && q + e < p.k; ++e) {
        tail[e] = p.w_is_bf16 ? Bf16ToF32(static_cast<const uint16_t*>(p.w)[row + q + e])
                              : static_cast<const float*>(p.w)[row + q + e];
      }
      std::memcpy(dst + (q - q0) * stride, tail, sizeof(tail));
    }
  }
}

void Avx2Columns(const Avx2Problem& p, int64_t j_begin, int64_t j_end) {
  const bool x_fits_l2 = p.m * RoundUp(p.k, kAvx2KStep) * int64_t{sizeof(float)} <= kStreamMaxXBytes;
  if (p.wide) {
    if (p.m <= kWideStreamMaxRows || (p.m <= kWideStreamMaxL2Rows && x_fits_l2)) {
      Avx512FStreamColumns(p, j_begin, j_end);
    } else {
      Avx512FBlockedColumns(p, j_begin, j_end);
    }
  } else if (p.m <= kStreamMaxRows && x_fits_l2) {
    StreamColumns(p, j_begin, j_end);
  } else {
    BlockedColumns(p, j_begin, j_end);
  }
}

}  // namespace layerpipe::matmul_internal
