// 512-bit registers that hold two 8-lane AVX2 accumulators side by side (lanes 0-7 and 8-15), the
// layout of the AVX-512F kernels that keep the AVX2 reduction order (matmul_avx512f.cc,
// attention_avx512f.cc): two rows are loaded into one register, the other operand's 8 values are
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

}  // namespace layerpipe::avx512_pairs

#endif  // LAYERPIPE_ENGINE_CPU_AVX512_PAIRS_H_
