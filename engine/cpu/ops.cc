#include "engine/cpu/ops.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>


// glibc's libmvec: tanhf on 8 lanes (AVX2), each lane computed alone.
extern "C" __m256 _ZGVdN8v_tanhf(__m256);

namespace layerpipe {
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
  // 8 values at a time through glibc's vector tanhf; the tail goes through the same vector call so
  // a value's result never depends on where it sits in the row.
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f), c = _mm256_set1_ps(0.044715f),
               s = _mm256_set1_ps(0.7978845608028654f);
  auto gelu_mul = [&](__m256 x, __m256 v) {
    const __m256 inner = _mm256_mul_ps(s, _mm256_add_ps(x, _mm256_mul_ps(_mm256_mul_ps(c, x), _mm256_mul_ps(x, x))));
    const __m256 t = _ZGVdN8v_tanhf(inner);
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, t)), v);
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(g + i, gelu_mul(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
  if (i < n) {
    alignas(32) float x[8] = {}, v[8] = {};
    std::memcpy(x, g + i, sizeof(float) * (n - i));
    std::memcpy(v, u + i, sizeof(float) * (n - i));
    _mm256_store_ps(x, gelu_mul(_mm256_load_ps(x), _mm256_load_ps(v)));
    std::memcpy(g + i, x, sizeof(float) * (n - i));
  }
}

}  // namespace layerpipe
