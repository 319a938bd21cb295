// The weighted sum of attention (attention_tiles.h, WeighTile) on 512-bit registers, for CPUs with
// AVX-512F: 16 dims a register instead of 8. Each output dim is still one fused multiply-add chain over
// the keys in position order, so the bits are those of the 8-wide tiles.
//
// Everything here executes AVX-512 instructions: attention.cc calls in only where the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "engine/cpu/attention_tiles.h"

#define LP_AVX512F __attribute__((target("avx512f")))

namespace layerpipe::attention_tiles {
namespace {

// Query vectors x 16-dim vectors per tile: 24 accumulators + 6 value vectors + 1 weight of the 32 zmm.
constexpr int kWideQueries = 4;
constexpr int kWideVectors = 6;

LP_AVX512F inline __m512 Load16(const float* p) { return _mm512_loadu_ps(p); }
LP_AVX512F inline __m512 Load16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// out[r][d0 .. d0 + 16·V) += Σ_j p[r][j] · v[j][d0 ..] for j in [0, keys), in j order.
template <int Q, int V, typename T>
LP_AVX512F void WeighTile16(const float* const* p, const T* const* v, int64_t keys, int d0, float* const* out) {
  __m512 acc[Q][V];
#pragma GCC unroll 8
  for (int r = 0; r < Q; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < V; ++c) acc[r][c] = _mm512_loadu_ps(out[r] + d0 + 16 * c);
  for (int64_t j = 0; j < keys; ++j) {
    __m512 vv[V];
#pragma GCC unroll 8
    for (int c = 0; c < V; ++c) vv[c] = Load16(v[j] + d0 + 16 * c);
#pragma GCC unroll 8
    for (int r = 0; r < Q; ++r) {
      const __m512 pr = _mm512_set1_ps(p[r][j]);
#pragma GCC unroll 8
      for (int c = 0; c < V; ++c) acc[r][c] = _mm512_fmadd_ps(pr, vv[c], acc[r][c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < Q; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < V; ++c) _mm512_storeu_ps(out[r] + d0 + 16 * c, acc[r][c]);
}

template <typename T>
using WeighFn = void (*)(const float* const*, const T* const*, int64_t, int, float* const*);

template <typename T, int Q, int... Vs>
constexpr std::array<WeighFn<T>, kWideVectors> WeighRow(std::integer_sequence<int, Vs...>) {
  return {&WeighTile16<Q, Vs + 1, T>...};
}
template <typename T, int... Qs>
constexpr std::array<std::array<WeighFn<T>, kWideVectors>, kWideQueries> WeighTable(
    std::integer_sequence<int, Qs...>) {
  return {WeighRow<T, Qs + 1>(std::make_integer_sequence<int, kWideVectors>())...};
}
// [queries - 1][vectors - 1]
template <typename T>
constexpr auto kWeighTiles16 = WeighTable<T>(std::make_integer_sequence<int, kWideQueries>());

template <typename T>
void Weigh16(const float* const* p, int queries, const T* const* v, int64_t keys, int dims, float* const* out) {
  for (int r = 0; r < queries; r += kWideQueries) {
    const int qn = std::min(kWideQueries, queries - r);
    for (int d = 0; d < dims; d += 16 * kWideVectors) {
      const int vn = std::min(kWideVectors, (dims - d) / 16);
      kWeighTiles16<T>[qn - 1][vn - 1](p + r, v, keys, d, out + r);
    }
  }
}

}  // namespace

void WeighWide(const float* const* p, int queries, const float* const* v, int64_t keys, int dims,
               float* const* out) {
  Weigh16(p, queries, v, keys, dims, out);
}

void WeighWide(const float* const* p, int queries, const uint16_t* const* v, int64_t keys, int dims,
               float* const* out) {
  Weigh16(p, queries, v, keys, dims, out);
}

}  // namespace layerpipe::attention_tiles
