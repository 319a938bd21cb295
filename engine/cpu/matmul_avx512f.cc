// AVX-512F matmul kernel, for CPUs with AVX-512 but without AVX-512 BF16 (Skylake-SP to Ice Lake
// servers, VMs that hide BF16), and for fp32 mode on those with it: x in fp32, W bf16 widened in
// registers, in the column order of matmul_kernels.h (an fp32 lane per output column, one fused
// multiply-add per value of k in increasing k). The loops are matmul_pair_kernel.h's, shared with the
// AVX-512 BF16 kernel, reading the same tiled weights; this file gives the products of a pair of k.
//
// Everything that executes AVX-512 instructions carries the target attribute; the front end calls in
// here only after checking the CPU, and nothing in this file runs otherwise.
#include <immintrin.h>

#include <algorithm>
#include <iterator>

#include "engine/cpu/avx512_transpose.h"
#include "engine/cpu/matmul_kernels.h"
#include "engine/cpu/matmul_prefetch.h"
#include "engine/cpu/tile_table.h"
#include "engine/model/tiled_rows.h"

#define LP_PAIR_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))

namespace layerpipe::matmul_internal {
namespace {

// x as fp32 rows (ldx counts floats). A 32-bit lane of weights holds a column's pair: its low half is
// the bf16 of value 2p, the high half that of 2p + 1, so shifting left by 16 and masking the low half
// off widen them exactly. The products of value 2p for every row come before those of 2p + 1, so the
// 3 widened vectors of one value at a time are live beside the 24 accumulators.
struct Dot {
  using X = float;
  // Prefill may widen each block once (PairProblem::widen_block; WidenedTile).
  static constexpr bool kWidensInBlock = true;
  static int64_t RowStride(int64_t ldx) { return ldx; }
  static constexpr int64_t kLdxBytes = 4;
  // Two groups' accumulators and both groups' raw and widened weights fit up to 2 rows (12 + 12).
  static constexpr int kPairRowsMax = 2;
  template <int S, int R, int V>
  LP_PAIR_TARGET __attribute__((always_inline)) static inline void Pair(const X* x, int64_t ldx, int64_t p,
                                                                        const __m512i (&w)[S][V],
                                                                        __m512 (&acc)[S][R][V]) {
    __m512 wide[S][V];
#pragma GCC unroll 2
    for (int s = 0; s < S; ++s) {
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) wide[s][v] = _mm512_castsi512_ps(_mm512_slli_epi32(w[s][v], 16));
    }
    Products<S, R, V>(x + 2 * p, ldx, wide, acc);
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
#pragma GCC unroll 2
    for (int s = 0; s < S; ++s) {
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) wide[s][v] = _mm512_castsi512_ps(_mm512_and_si512(w[s][v], high));
    }
    Products<S, R, V>(x + 2 * p + 1, ldx, wide, acc);
  }

 private:
  // acc[s][r][v] += x[r * ldx] * wide[s][v].
  template <int S, int R, int V>
  LP_PAIR_TARGET __attribute__((always_inline)) static inline void Products(const X* x, int64_t ldx,
                                                                            const __m512 (&wide)[S][V],
                                                                            __m512 (&acc)[S][R][V]) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 xb = _mm512_set1_ps(x[r * ldx]);
#pragma GCC unroll 2
      for (int s = 0; s < S; ++s) {
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[s][r][v] = _mm512_fmadd_ps(xb, wide[s][v], acc[s][r][v]);
      }
    }
  }
};

#include "engine/cpu/matmul_pair_kernel.h"

}  // namespace

void Avx512FColumns(const PairProblem& p, int64_t j_begin, int64_t j_end) { PairColumns(p, j_begin, j_end); }

}  // namespace layerpipe::matmul_internal
