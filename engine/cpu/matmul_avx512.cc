// AVX-512 BF16 matmul kernel (vdpbf16ps): x and W both bf16, fp32 accumulation. Every (row, column)
// runs the same per-lane arithmetic (see kAvx512KStep) whatever the row count, so m changes speed,
// never bits:
//  - streaming (decode): weights are read in place, once, straight from memory;
//  - packed (prefill): a block of weight columns is copied into a tile-interleaved buffer that every
//    row tile reuses, rows are taken in blocks and k in ranges, with partial sums parked per lane
//    between k ranges; where k is not a multiple of 32 the packing's zeros feed vdpbf16ps exactly
//    what the streaming path's masked loads do.
//
// Everything that executes AVX-512 instructions carries kTarget; the front end calls in here only
// after checking the CPU, and nothing in this file runs otherwise.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "engine/cpu/matmul_kernels.h"

#define LP_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace layerpipe::matmul_internal {
namespace {

// 4 x 4 tile: 16 accumulators + 4 weight vectors + 1 x vector of the 32 zmm registers.
constexpr int kRows = 4;
constexpr int kCols = 4;
constexpr int64_t kLanes = 16;
// Few rows: weights are read in place, the whole k at once (they stream from DRAM exactly once).
constexpr int64_t kStreamMaxRows = 8;
// Many rows: kBlockCols weight columns are packed (all of k, tile-interleaved: L2/L3) once per column
// block and every row tile reuses them. Packing makes each tile's weights one sequential stream: read
// in place, the rows of a tile lie k * 2 bytes apart, which for k = 4096 puts them in one L1 set.
constexpr int64_t kBlockCols = 32;
// k is taken kBlockK values at a time, so the x tile (4 rows x kBlockK bf16, 8 KiB) stays in L1 while
// the weight tiles go past; partial sums are parked per lane between k blocks.
constexpr int64_t kBlockK = 1024;
// Rows are taken this many at a time, so a k block of their x and their parked sums (2 KiB + 2 KiB
// per row) stay in L2; with all rows of a long prefill chunk at once both came from DRAM (30 % of
// peak at m = 4096 against 60 % at m = 256).
constexpr int64_t kBlockRows = 128;
// How far ahead (in weight elements, 512 bytes) each in-place weight row is prefetched; the value
// measured best for the AVX2 kernel on Zen 4.
constexpr int64_t kPrefetchAhead = 256;

// Fixed tree: 16 -> 8 (lane l + lane l+8) -> 4 -> 2 -> 1, always in this order. Goes through
// memory for the 512 -> 256 split: it runs once per output, and GCC 12's 512-bit cast intrinsics
// raise spurious -Wmaybe-uninitialized warnings.
LP_AVX512_BF16 inline float HorizontalSum(__m512 v) {
  alignas(64) float lanes[kLanes];
  _mm512_store_ps(lanes, v);
  const __m256 h = _mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8));
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// Weight sources for Accumulate: Load(c, q) is w[column c][q, q + 32) of the tile.
// In place: rows of the weight matrix, prefetched ahead (the DRAM stream of decode).
struct InPlaceWeights {
  const uint16_t* w;
  int64_t ld;
  bool prefetch;
  LP_AVX512_BF16 __m512i Load(int c, int64_t q) const { return _mm512_loadu_si512(w + c * ld + q); }
  LP_AVX512_BF16 __m512i LoadPartial(int c, int64_t q, __mmask32 mask) const {
    return _mm512_maskz_loadu_epi16(mask, w + c * ld + q);
  }
  void Prefetch(int c, int64_t q) const {
    if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(w + c * ld + q + kPrefetchAhead), _MM_HINT_T0);
  }
};
// Packed (PackColumns): for each step of 32 values of k, the tile's kCols vectors one after another,
// zeros past k; a sequential stream the hardware prefetcher follows on its own.
struct PackedWeights {
  const uint16_t* tile;
  LP_AVX512_BF16 __m512i Load(int c, int64_t q) const {
    return _mm512_load_si512(tile + q * kCols + c * kAvx512KStep);  // q is a multiple of 32
  }
  LP_AVX512_BF16 __m512i LoadPartial(int c, int64_t q, __mmask32) const { return Load(c, q); }
  void Prefetch(int, int64_t) const {}
};

// Decode of one row with weight rows up to this long reads them one column at a time, without software
// prefetch: a thread's weights are then one sequential stream, which the hardware prefetcher keeps
// ~20 % closer to the DRAM bandwidth than four interleaved prefetched rows (Zen 4, q/gate/up shapes
// and the head). Longer rows (down_proj, k = 15360) measured faster with the four prefetched rows.
constexpr int64_t kSingleRowStreamMaxK = 8192;
inline bool SingleRowStream(const Avx512Bf16Problem& p) { return p.m == 1 && p.k <= kSingleRowStreamMaxK; }

// acc[r][c] += over q in [q_begin, q_end): x[r][q] * w[c][q], in steps of 32 (the last one may be
// partial: weights beyond q_end are zero; x is zero-padded there by the front end).
template <int R, int C, typename W>
LP_AVX512_BF16 void Accumulate(const uint16_t* x, int64_t ldx, const W& w, int64_t q_begin, int64_t q_end,
                               __m512 (&acc)[R][C]) {
  int64_t q = q_begin;
  for (; q + kAvx512KStep <= q_end; q += kAvx512KStep) {
    __m512i wv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      w.Prefetch(c, q);
      wv[c] = w.Load(c, q);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512i xv = _mm512_loadu_si512(x + r * ldx + q);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], (__m512bh)xv, (__m512bh)wv[c]);
    }
  }
  if (q < q_end) {
    const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << (q_end - q)) - 1);
    __m512i wv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) wv[c] = w.LoadPartial(c, q, mask);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512i xv = _mm512_loadu_si512(x + r * ldx + q);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], (__m512bh)xv, (__m512bh)wv[c]);
    }
  }
}

// One R x C tile (rows i.., columns j..) over k range [q0, q1). Partial sums live in `park` (16
// floats per (row, column), row stride park_ld vectors) between k blocks; the block that ends k
// writes y.
template <int R, int C, typename W>
LP_AVX512_BF16 void Tile(const Avx512Bf16Problem& p, int64_t i, int64_t j, const W& w, int64_t q0, int64_t q1,
                         bool first, bool last, float* park, int64_t park_ld) {
  __m512 acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      acc[r][c] = first ? _mm512_setzero_ps() : _mm512_load_ps(park + (r * park_ld + c) * kLanes);
    }
  }
  Accumulate<R, C>(p.x + i * p.ldx, p.ldx, w, q0, q1, acc);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      if (last) {
        p.y[(i + r) * p.n + j + c] = HorizontalSum(acc[r][c]);
      } else {
        _mm512_store_ps(park + (r * park_ld + c) * kLanes, acc[r][c]);
      }
    }
  }
}

template <int R, int C>
LP_AVX512_BF16 void StreamTile(const Avx512Bf16Problem& p, int64_t i, int64_t j) {
  Tile<R, C>(p, i, j, InPlaceWeights{p.w + j * p.k, p.k, !SingleRowStream(p)}, 0, p.k, true, true, nullptr, 0);
}

template <int R, int C>
LP_AVX512_BF16 void PackedTile(const Avx512Bf16Problem& p, int64_t i, int64_t j, const uint16_t* tile, int64_t q0, int64_t q1,
                float* park, int64_t park_ld) {
  const int64_t kp = RoundUp(p.k, kAvx512KStep);
  Tile<R, C>(p, i, j, PackedWeights{tile}, q0, q1, q0 == 0, q1 >= kp, park, park_ld);
}

using StreamFn = void (*)(const Avx512Bf16Problem&, int64_t, int64_t);
using PackedFn = void (*)(const Avx512Bf16Problem&, int64_t, int64_t, const uint16_t*, int64_t, int64_t, float*,
                          int64_t);

template <int R, int... Cs>
constexpr std::array<StreamFn, kCols> StreamRow(std::integer_sequence<int, Cs...>) {
  return {&StreamTile<R, Cs + 1>...};
}
template <int R, int... Cs>
constexpr std::array<PackedFn, kCols> PackedRow(std::integer_sequence<int, Cs...>) {
  return {&PackedTile<R, Cs + 1>...};
}
template <int... Rs>
constexpr std::array<std::array<StreamFn, kCols>, kRows> StreamTable(std::integer_sequence<int, Rs...>) {
  return {StreamRow<Rs + 1>(std::make_integer_sequence<int, kCols>())...};
}
template <int... Rs>
constexpr std::array<std::array<PackedFn, kCols>, kRows> PackedTable(std::integer_sequence<int, Rs...>) {
  return {PackedRow<Rs + 1>(std::make_integer_sequence<int, kCols>())...};
}
// [rows - 1][cols - 1]
constexpr auto kStreamTiles = StreamTable(std::make_integer_sequence<int, kRows>());
constexpr auto kPackedTiles = PackedTable(std::make_integer_sequence<int, kRows>());

// Columns [j, j + cols) of w into `out` as tiles of kCols columns, tile t at out + t * kp (kp: k
// rounded up to 32), in PackedWeights' layout; missing columns of a last narrow tile are zero.
LP_AVX512_BF16 void PackColumns(const Avx512Bf16Problem& p, int64_t j, int64_t cols, uint16_t* out) {
  const int64_t kp = RoundUp(p.k, kAvx512KStep);
  for (int64_t t = 0; t < cols; t += kCols) {
    uint16_t* tile = out + t * kp;
    for (int c = 0; c < kCols; ++c) {
      const bool present = t + c < cols;
      const uint16_t* src = present ? p.w + (j + t + c) * p.k : p.w;
      for (int64_t q = 0; q < kp; q += kAvx512KStep) {
        const int64_t len = present ? std::min(kAvx512KStep, p.k - q) : 0;
        const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << len) - 1);
        _mm512_store_si512(tile + q * kCols + c * kAvx512KStep,
                           _mm512_maskz_loadu_epi16(mask, src + q));
      }
    }
  }
}

void StreamColumns(const Avx512Bf16Problem& p, int64_t j_begin, int64_t j_end) {
  const int64_t step = SingleRowStream(p) ? 1 : kCols;
  for (int64_t j = j_begin; j < j_end; j += step) {
    const int64_t cols = std::min<int64_t>(step, j_end - j);
    for (int64_t i = 0; i < p.m; i += kRows) {
      kStreamTiles[std::min<int64_t>(kRows, p.m - i) - 1][cols - 1](p, i, j);
    }
  }
}

void PackedColumns(const Avx512Bf16Problem& p, int64_t j_begin, int64_t j_end) {
  const int64_t kp = RoundUp(p.k, kAvx512KStep);
  uint16_t* packed = ThreadScratch<uint16_t, Slot::kPackedWeights>(kBlockCols * kp);
  float* park = kp > kBlockK
                    ? ThreadScratch<float, Slot::kPartialSums>(std::min(p.m, kBlockRows) * kBlockCols * kLanes)
                    : nullptr;
  for (int64_t jc = j_begin; jc < j_end; jc += kBlockCols) {
    const int64_t nc = std::min(kBlockCols, j_end - jc);
    PackColumns(p, jc, nc, packed);
    for (int64_t i0 = 0; i0 < p.m; i0 += kBlockRows) {
      const int64_t i1 = std::min(p.m, i0 + kBlockRows);
      for (int64_t q0 = 0; q0 < kp; q0 += kBlockK) {
        const int64_t q1 = std::min(q0 + kBlockK, kp);
        for (int64_t i = i0; i < i1; i += kRows) {
          const int64_t rows = std::min<int64_t>(kRows, i1 - i);
          for (int64_t t = 0; t < nc; t += kCols) {
            kPackedTiles[rows - 1][std::min<int64_t>(kCols, nc - t) - 1](
                p, i, jc + t, packed + t * kp, q0, q1, park ? park + ((i - i0) * kBlockCols + t) * kLanes : nullptr,
                kBlockCols);
          }
        }
      }
    }
  }
}

}  // namespace

void Avx512Bf16Columns(const Avx512Bf16Problem& p, int64_t j_begin, int64_t j_end) {
  if (p.m <= kStreamMaxRows) {
    StreamColumns(p, j_begin, j_end);
  } else {
    PackedColumns(p, j_begin, j_end);
  }
}

}  // namespace layerpipe::matmul_internal
