// AVX-512 BF16 matmul kernel (vdpbf16ps): x and W both bf16, fp32 accumulation. One code path for
// every row count -- each (row, column) always sees the same k blocks in the same order, so bits do
// not depend on m. Weights are read in place (already bf16, no packing needed). For many rows, a
// block of weight columns x k range is kept hot in cache while all row tiles pass over it, and
// partial sums are parked per lane between k blocks.
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
// Few rows: the whole k in one block (weights stream from DRAM exactly once). Many rows: blocks of
// kBlockCols x kBlockK bf16 weights (64 KiB, L2-resident) shared by all row tiles.
constexpr int64_t kStreamMaxRows = 8;
constexpr int64_t kBlockCols = 32;
constexpr int64_t kBlockK = 1024;
// How far ahead (in weight elements, 512 bytes) each weight row is prefetched; the value measured
// best for the AVX2 kernel on Zen 4.
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

// acc[r][c] += over q in [q_begin, q_end): x[r][q] * w[c][q], in steps of 32 (the last one may be
// partial: weights beyond q_end are masked to zero; x is zero-padded there by the front end).
template <int R, int C>
LP_AVX512_BF16 void Accumulate(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                               int64_t q_begin, int64_t q_end, __m512 (&acc)[R][C]) {
  int64_t q = q_begin;
  for (; q + kAvx512KStep <= q_end; q += kAvx512KStep) {
    __m512i wv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      _mm_prefetch(reinterpret_cast<const char*>(w + c * ldw + q + kPrefetchAhead), _MM_HINT_T0);
      wv[c] = _mm512_loadu_si512(w + c * ldw + q);
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
    for (int c = 0; c < C; ++c) wv[c] = _mm512_maskz_loadu_epi16(mask, w + c * ldw + q);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512i xv = _mm512_loadu_si512(x + r * ldx + q);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], (__m512bh)xv, (__m512bh)wv[c]);
    }
  }
}

// One tile over k range [q0, q1). Partial sums live in `park` (16 floats per (row, column), row
// stride park_ld vectors) between k blocks; the block that ends at k writes y.
template <int R, int C>
LP_AVX512_BF16 void Tile(const Avx512Bf16Problem& p, int64_t i, int64_t j, int64_t q0, int64_t q1,
                         float* park, int64_t park_ld) {
  __m512 acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      acc[r][c] = q0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(park + (r * park_ld + c) * kLanes);
    }
  }
  Accumulate<R, C>(p.x + i * p.ldx, p.ldx, p.w + j * p.k, p.k, q0, q1, acc);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      if (q1 >= p.k) {
        p.y[(i + r) * p.n + j + c] = HorizontalSum(acc[r][c]);
      } else {
        _mm512_store_ps(park + (r * park_ld + c) * kLanes, acc[r][c]);
      }
    }
  }
}

using TileFn = void (*)(const Avx512Bf16Problem&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);

template <int R, int... Cs>
constexpr std::array<TileFn, kCols> TileRow(std::integer_sequence<int, Cs...>) {
  return {&Tile<R, Cs + 1>...};
}
template <int... Rs>
constexpr std::array<std::array<TileFn, kCols>, kRows> TileTable(std::integer_sequence<int, Rs...>) {
  return {TileRow<Rs + 1>(std::make_integer_sequence<int, kCols>())...};
}
// [rows - 1][cols - 1]
constexpr auto kTiles = TileTable(std::make_integer_sequence<int, kRows>());

}  // namespace

void Avx512Bf16Columns(const Avx512Bf16Problem& p, int64_t j_begin, int64_t j_end) {
  const bool stream = p.m <= kStreamMaxRows;
  const int64_t block_cols = stream ? kCols : kBlockCols;
  const int64_t block_k = stream ? p.k : kBlockK;
  float* park = block_k < p.k ? ThreadScratch<float, Slot::kPartialSums>(p.m * kBlockCols * kLanes) : nullptr;
  for (int64_t jc = j_begin; jc < j_end; jc += block_cols) {
    const int64_t nc = std::min(block_cols, j_end - jc);
    for (int64_t q0 = 0; q0 < p.k; q0 += block_k) {
      const int64_t q1 = std::min(q0 + block_k, p.k);
      for (int64_t i = 0; i < p.m; i += kRows) {
        const int64_t rows = std::min<int64_t>(kRows, p.m - i);
        for (int64_t t = 0; t < nc; t += kCols) {
          const int64_t cols = std::min<int64_t>(kCols, nc - t);
          kTiles[rows - 1][cols - 1](p, i, jc + t, q0, q1,
                                     park ? park + (i * kBlockCols + t) * kLanes : nullptr, kBlockCols);
        }
      }
    }
  }
}

}  // namespace layerpipe::matmul_internal
