#include "engine/cpu/ops.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>


// glibc's libmvec: tanhf on 8 lanes (AVX2), each lane computed alone.
extern "C" __m256 _ZGVdN8v_tanhf(__m256);

namespace layerpipe {
namespace {

// Σ x² of a row: every square is exact in double (a float's 24-bit significand squared fits in 53 bits),
// summed in 16 lanes (4 chains of 4, value i in lane i mod 16) then combined in a fixed order, and the
// values past the last 16 in order. A single chain of double additions (~4 cycles a value) made the
// norms ~3 % of a prefill, the layer's input norm on one thread.
double SumOfSquares(const float* x, int64_t n) {
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    const __m256d d[4] = {_mm256_cvtps_pd(_mm256_castps256_ps128(a)), _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)),
                          _mm256_cvtps_pd(_mm256_castps256_ps128(b)), _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1))};
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) acc[c] = _mm256_fmadd_pd(d[c], d[c], acc[c]);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3])));
  double ss = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) ss += double(x[i]) * x[i];
  return ss;
}

}  // namespace

void RmsNorm(const float* x, const float* w, int64_t n, double eps, float* out) {
  const float inv = static_cast<float>(1.0 / std::sqrt(SumOfSquares(x, n) / double(n) + eps));
  const __m256 vinv = _mm256_set1_ps(inv);
  int64_t i = 0;
  if (w == nullptr) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vinv));
    for (; i < n; ++i) out[i] = x[i] * inv;
  } else {
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv), _mm256_loadu_ps(w + i)));
    }
    for (; i < n; ++i) out[i] = x[i] * inv * w[i];
  }
}

void RmsNormHeads(float* x, const float* w, int heads, int head_dim, double eps) {
  for (int h = 0; h < heads; ++h) RmsNorm(x + int64_t(h) * head_dim, w, head_dim, eps, x + int64_t(h) * head_dim);
}

std::vector<double> RopeInvFreq(int head_dim, const RopeConfig& rope) {
  std::vector<double> inv(head_dim / 2, 0.0);
  for (int i = 0; i < rope.Pairs(head_dim); ++i) inv[i] = std::pow(rope.theta, -2.0 * i / head_dim);
  return inv;
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
