// The in-register transpose that turns 16 rows of bf16 pairs into 16 vectors of one pair of each row:
// the operand order of the vdpbf16ps kernels that broadcast the other side's pair (attention_dot.cc's
// keys, the pair-order matmul kernels' row-major weights: matmul_pair_kernel.h). Only for code that runs where the CPU has AVX-512F.
#ifndef LAYERPIPE_ENGINE_CPU_AVX512_TRANSPOSE_H_
#define LAYERPIPE_ENGINE_CPU_AVX512_TRANSPOSE_H_

#include <immintrin.h>

namespace layerpipe::avx512_transpose {

// The 16 x 16 matrix of 32-bit values in r, transposed in place. The loops are unrolled so that a, b
// and r stay in registers: rolled, GCC kept them on the stack, and a transpose cost several times its
// 64 shuffles (2-core Zen 5 VM, alternating binaries: a sliding layer's decode attention 1.2-1.3x, the
// matmuls on row-major weights at one row 62-68 -> 82-95 % of the read, at 64 rows 61-67 -> 65-79 % of
// the vdpbf16ps peak).
__attribute__((target("avx512f"))) inline void Transpose16(__m512i (&r)[16]) {
  __m512i a[16], b[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // b[4i + c], 128-bit lane L: rows 4i .. 4i + 3 of column 4L + c.
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    b[4 * i + 0] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512i t0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x44);
    const __m512i t1 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xee);
    const __m512i t2 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x44);
    const __m512i t3 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xee);
    r[c] = _mm512_shuffle_i32x4(t0, t2, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(t0, t2, 0xdd);
    r[8 + c] = _mm512_shuffle_i32x4(t1, t3, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(t1, t3, 0xdd);
  }
}

}  // namespace layerpipe::avx512_transpose

#endif  // LAYERPIPE_ENGINE_CPU_AVX512_TRANSPOSE_H_
