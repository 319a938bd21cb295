// The fixed horizontal sum of an 8-float AVX2 accumulator that the CPU kernels' reduction order
// promises (matmul_kernels.h, attention_tiles.h): one tree, so a dot product's bits never depend on
// which kernel computed it.
#ifndef LAYERPIPE_ENGINE_CPU_AVX2_SUM_H_
#define LAYERPIPE_ENGINE_CPU_AVX2_SUM_H_

#include <immintrin.h>

namespace layerpipe {

// (l0+l4, l1+l5, l2+l6, l3+l7) -> pairs (0,2), (1,3) -> final.
inline float HorizontalSum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CPU_AVX2_SUM_H_
