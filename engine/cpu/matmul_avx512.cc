// AVX-512 BF16 matmul kernel (vdpbf16ps): x and W both bf16, fp32 accumulation, in the AVX-512 BF16
// order of matmul_kernels.h: an fp32 lane per output column, a pair of x broadcast against the same
// pair of 16 weight rows. The loops are matmul_pair_kernel.h's; this file gives the product of a pair.
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

#define LP_PAIR_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace layerpipe::matmul_internal {
namespace {

// x as rows of bf16 pairs (ldx counts bf16 values); one vdpbf16ps per pair, row and vector.
struct Dot {
  using X = uint32_t;
  static constexpr bool kWidensInBlock = false;  // nothing to widen: vdpbf16ps reads bf16 pairs
  static int64_t RowStride(int64_t ldx) { return ldx / 2; }
  static constexpr int64_t kLdxBytes = 2;
  // Two groups' accumulators fit beside their weights up to 4 rows (24 + 6 of 32 registers).
  static constexpr int kPairRowsMax = 4;
  template <int S, int R, int V>
  LP_PAIR_TARGET __attribute__((always_inline)) static inline void Pair(const X* x, int64_t ldx, int64_t p,
                                                                        const __m512i (&w)[S][V],
                                                                        __m512 (&acc)[S][R][V]) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512i xb = _mm512_set1_epi32(static_cast<int>(x[r * ldx + p]));
#pragma GCC unroll 2
      for (int s = 0; s < S; ++s) {
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[s][r][v] = _mm512_dpbf16_ps(acc[s][r][v], (__m512bh)xb, (__m512bh)w[s][v]);
      }
    }
  }
};

#include "engine/cpu/matmul_pair_kernel.h"

}  // namespace

void Avx512Bf16Columns(const PairProblem& p, int64_t j_begin, int64_t j_end) { PairColumns(p, j_begin, j_end); }

}  // namespace layerpipe::matmul_internal
