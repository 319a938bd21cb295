#include "engine/cpu/ops.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "engine/model/bf16.h"

namespace layerpipe {
namespace {

inline float HorizontalSum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256 LoadBf16(const uint16_t* p) {
  __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

}  // namespace

void RmsNorm(const float* x, const float* w, int64_t n, double eps, float* out) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / double(n) + eps));
  if (w == nullptr) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv;
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
  }
}

void RmsNormHeads(float* x, const float* w, int heads, int head_dim, double eps) {
  for (int h = 0; h < heads; ++h) RmsNorm(x + int64_t(h) * head_dim, w, head_dim, eps, x + int64_t(h) * head_dim);
}

std::vector<double> RopeInvFreq(int head_dim, double theta, double partial_rotary_factor) {
  const int half = head_dim / 2;
  const int rotary = static_cast<int>(partial_rotary_factor * head_dim / 2);
  std::vector<double> inv(half, 0.0);
  for (int i = 0; i < rotary && i < half; ++i) inv[i] = std::pow(theta, -2.0 * i / head_dim);
  return inv;
}

int RotaryPairs(const std::vector<double>& inv_freq) {
  int n = 0;
  while (n < static_cast<int>(inv_freq.size()) && inv_freq[n] != 0.0) ++n;
  return n;
}

void RopeCosSin(int64_t pos, const std::vector<double>& inv_freq, int rotary_pairs, float* out) {
  for (int i = 0; i < rotary_pairs; ++i) {
    const double a = double(pos) * inv_freq[i];
    out[i] = static_cast<float>(std::cos(a));
    out[rotary_pairs + i] = static_cast<float>(std::sin(a));
  }
}

void ApplyRope(float* x, int heads, int head_dim, const float* cos_sin, int rotary_pairs) {
  const int half = head_dim / 2;
  const float* c = cos_sin;
  const float* s = cos_sin + rotary_pairs;
  for (int h = 0; h < heads; ++h) {
    float* v = x + int64_t(h) * head_dim;
    for (int i = 0; i < rotary_pairs; ++i) {
      const float x1 = v[i], x2 = v[i + half];
      v[i] = x1 * c[i] - x2 * s[i];
      v[i + half] = x2 * c[i] + x1 * s[i];
    }
  }
}

void GeluTanhMul(float* g, const float* u, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    g[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x))) * u[i];
  }
}

float Dot(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float s = HorizontalSum(acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

float Dot(const float* a, const uint16_t* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), LoadBf16(b + i), acc);
  float s = HorizontalSum(acc);
  for (; i < n; ++i) s += a[i] * Bf16ToF32(b[i]);
  return s;
}

void Axpy(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

void Axpy(float a, const uint16_t* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, LoadBf16(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] = std::fma(a, Bf16ToF32(x[i]), y[i]);
}

void RoundToBf16InPlace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = Bf16ToF32(F32ToBf16(x[i]));
}

void ToBf16(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = F32ToBf16(x[i]);
}

}  // namespace layerpipe
