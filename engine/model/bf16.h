// bfloat16 <-> float32 conversion. bf16 values are carried as raw uint16_t bits (the upper half of
// an IEEE float32). Narrowing rounds to nearest, ties to even, like PyTorch's .to(torch.bfloat16);
// NaNs stay NaN (quietened, sign kept) and infinities stay infinite. Denormals are kept, not flushed.
#ifndef LAYERPIPE_ENGINE_MODEL_BF16_H_
#define LAYERPIPE_ENGINE_MODEL_BF16_H_

#include <immintrin.h>

#include <bit>
#include <cstdint>

namespace layerpipe {

inline float Bf16ToF32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

inline uint16_t F32ToBf16(float f) {
  uint32_t b = std::bit_cast<uint32_t>(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x0040u);
  // Adding 0x7fff plus the lowest kept bit carries into the kept bits exactly when the dropped half
  // is above one half, or exactly one half with an odd kept part. Overflow correctly yields inf.
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

// The float nearest to f that is exactly representable in bf16 (same rounding as F32ToBf16).
inline float RoundToBf16(float f) { return Bf16ToF32(F32ToBf16(f)); }

namespace bf16_internal {

// Eight floats rounded to bf16, left in the upper 16 bits of each 32-bit lane (low bits zero).
inline __m256i RoundLanes(__m256 v) {
  const __m256i b = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb);
  const __m256i abs = _mm256_and_si256(b, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  const __m256i quiet_nan = _mm256_or_si256(b, _mm256_set1_epi32(0x00400000));
  const __m256i r = _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
  return _mm256_and_si256(r, _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
}

}  // namespace bf16_internal

// dst[i] = RoundToBf16(src[i]); dst may equal src.
inline void RoundRowToBf16(const float* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i r = bf16_internal::RoundLanes(_mm256_loadu_ps(src + i));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(r));
  }
  for (; i < n; ++i) dst[i] = RoundToBf16(src[i]);
}

// dst[i] = F32ToBf16(src[i]).
inline void F32ToBf16Row(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i lo = _mm256_srli_epi32(bf16_internal::RoundLanes(_mm256_loadu_ps(src + i)), 16);
    const __m256i hi = _mm256_srli_epi32(bf16_internal::RoundLanes(_mm256_loadu_ps(src + i + 8)), 16);
    // packus interleaves 128-bit halves (lo0 hi0 lo1 hi1); the permute restores element order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  for (; i < n; ++i) dst[i] = F32ToBf16(src[i]);
}

// Bf16ToF32 of src[0 .. 8) (exact: the bits move to the upper half of each lane).
inline __m256 Bf16x8ToF32(const uint16_t* src) {
  const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}

// dst[i] = Bf16ToF32(src[i]).
inline void Bf16ToF32Row(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, Bf16x8ToF32(src + i));
  for (; i < n; ++i) dst[i] = Bf16ToF32(src[i]);
}

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_MODEL_BF16_H_
