// 512-bit registers that hold two 8-lane AVX2 accumulators side by side (lanes 0-7 and 8-15), the
// layout of the AVX-512F attention kernels that keep the AVX2 reduction order (attention_avx512f.cc):
// two rows are loaded into one register, the other operand's 8 values are
// broadcast to both halves, and each half is summed with the AVX2 tree, so the bits are the AVX2
// kernels'. Only for code that runs where the CPU has AVX-512F.
#ifndef LAYERPIPE_ENGINE_CPU_AVX512_PAIRS_H_
#define LAYERPIPE_ENGINE_CPU_AVX512_PAIRS_H_

#include <immintrin.h>

#include <cstdint>

#include "engine/cpu/avx2_sum.h"

#define LP_AVX512F __attribute__((target("avx512f")))

namespace layerpipe::avx512_pairs {

LP_AVX512F inline __m512 Join(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}

// 8 values of row a in the low half, 8 of row b in the high half; bf16 rows (uint16_t bits) widened exactly.
LP_AVX512F inline __m512 LoadPair(const float* a, const float* b) {
  return Join(_mm256_loadu_ps(a), _mm256_loadu_ps(b));
}
LP_AVX512F inline __m512 LoadPair(const uint16_t* a, const uint16_t* b) {
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
                                               _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(both), 16));
}

// p's 8 values in both halves.
LP_AVX512F inline __m512 BroadcastHalves(const float* p) {
  return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(p))));
}

// One half's 8 lanes summed with the AVX2 tree (HorizontalSum).
LP_AVX512F inline float HalfSum(__m512 v, int half) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  return HorizontalSum(_mm256_load_ps(lanes + 8 * half));
}

// The AVX2 tree of many halves at once: with s = lanes l + l+4, t = (s0 + s2, s1 + s3), sum = t0 + t1,
// the same additions of the same operands as HalfSum, 12 halves across registers instead of one at a
// time through memory.
// Step s: of x's and y's halves (two each), the four halves' s, one per 128-bit block.
LP_AVX512F inline __m512 TreeS(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
}
// Step t: block i holds (t0, t1) of x's half in block i, then of y's.
LP_AVX512F inline __m512 TreeT(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x44), _mm512_shuffle_ps(x, y, 0xEE));
}

// The sums of the halves of acc[0 .. P) (P <= 6), the same additions of the same operands as HalfSum,
// 12 halves across registers instead of one at a time through memory: half h's sum lies in lane
// HalfLane(h).
constexpr int HalfLane(int h) { return 4 * (h % 4) + h / 4; }
template <int P>
LP_AVX512F inline __m512 HalfSums(const __m512 (&acc)[P]) {
  static_assert(P <= 6);
  __m512 a[6];
#pragma GCC unroll 6
  for (int c = 0; c < 6; ++c) a[c] = c < P ? acc[c] : _mm512_setzero_ps();
  const __m512 w0 = TreeS(a[0], a[1]), w1 = TreeS(a[2], a[3]), w2 = TreeS(a[4], a[5]);  // halves 4i .. 4i + 3
  const __m512 z0 = TreeT(w0, w1), z1 = TreeT(w2, w2);  // block i: halves i, 4 + i; 8 + i twice
  // Block i: the sums of halves i, 4 + i, 8 + i (and 8 + i again).
  return _mm512_add_ps(_mm512_shuffle_ps(z0, z1, 0x88), _mm512_shuffle_ps(z0, z1, 0xDD));
}

// out[0 .. count) = the sums of the halves of acc[0 .. P) in order (count <= 2P <= 12): what
// out[i] = HalfSum(acc[i / 2], i % 2) gives, with one masked store.
template <int P>
LP_AVX512F inline void StorePairSums(const __m512 (&acc)[P], int count, float* out) {
  const __m512i order = _mm512_setr_epi32(HalfLane(0), HalfLane(1), HalfLane(2), HalfLane(3), HalfLane(4),
                                          HalfLane(5), HalfLane(6), HalfLane(7), HalfLane(8), HalfLane(9),
                                          HalfLane(10), HalfLane(11), HalfLane(12), HalfLane(13), HalfLane(14),
                                          HalfLane(15));
  _mm512_mask_storeu_ps(out, static_cast<__mmask16>((1u << count) - 1), _mm512_permutexvar_ps(order, HalfSums(acc)));
}

}  // namespace layerpipe::avx512_pairs

#endif  // LAYERPIPE_ENGINE_CPU_AVX512_PAIRS_H_
