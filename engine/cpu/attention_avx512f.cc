// Attention's tiles (attention_tiles.h) on 512-bit registers, for CPUs with AVX-512F, with the bits of
// the 8-wide tiles:
//  - scores: two keys side by side in one register (avx512_pairs.h), the query's 8 dims broadcast to
//    both halves, so each score is still an 8-lane chain over the dims and the AVX2 horizontal sum;
//  - weighted sums: 16 dims a register instead of 8, each output dim still one fused multiply-add chain
//    over the keys in position order.
//
// Everything here executes AVX-512 instructions: attention.cc calls in only where the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "engine/cpu/attention_tiles.h"
#include "engine/cpu/avx512_pairs.h"

namespace layerpipe::attention_tiles {
namespace {

using avx512_pairs::BroadcastHalves;
using avx512_pairs::HalfSum;
using avx512_pairs::LoadPair;

// Query vectors x key pairs per score tile: 24 accumulators + 6 key pairs + 1 query of the 32 zmm.
constexpr int kScoreQueries = 4;
constexpr int kKeyPairs = 6;

// scores[r * ld + c] = q[r] · k[c] for Q query vectors and the first `keys` (<= 2P) keys; a pair's
// missing second key reads the first again and is not stored.
template <int Q, int P, typename T>
LP_AVX512F void ScoreTile16(const float* const* q, const T* const* k, int keys, int hd, float* scores, int64_t ld) {
  const T* second[P];
#pragma GCC unroll 8
  for (int c = 0; c < P; ++c) second[c] = k[std::min(2 * c + 1, keys - 1)];
  __m512 acc[Q][P];
#pragma GCC unroll 8
  for (int r = 0; r < Q; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < P; ++c) acc[r][c] = _mm512_setzero_ps();
  int d = 0;
  for (; d + 8 <= hd; d += 8) {
    __m512 kv[P];
#pragma GCC unroll 8
    for (int c = 0; c < P; ++c) kv[c] = LoadPair(k[2 * c] + d, second[c] + d);
#pragma GCC unroll 8
    for (int r = 0; r < Q; ++r) {
      const __m512 qv = BroadcastHalves(q[r] + d);
#pragma GCC unroll 8
      for (int c = 0; c < P; ++c) acc[r][c] = _mm512_fmadd_ps(qv, kv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < Q; ++r) {
    for (int c = 0; c < 2 * P && c < keys; ++c) {
      scores[r * ld + c] = ScoreTail(HalfSum(acc[r][c / 2], c % 2), q[r], k[c], d, hd);
    }
  }
}

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
using ScoreFn = void (*)(const float* const*, const T* const*, int, int, float*, int64_t);

template <typename T, int Q, int... Ps>
constexpr std::array<ScoreFn<T>, kKeyPairs> ScoreRow(std::integer_sequence<int, Ps...>) {
  return {&ScoreTile16<Q, Ps + 1, T>...};
}
template <typename T, int... Qs>
constexpr std::array<std::array<ScoreFn<T>, kKeyPairs>, kScoreQueries> ScoreTable(std::integer_sequence<int, Qs...>) {
  return {ScoreRow<T, Qs + 1>(std::make_integer_sequence<int, kKeyPairs>())...};
}
// [queries - 1][pairs - 1]
template <typename T>
constexpr auto kScoreTiles16 = ScoreTable<T>(std::make_integer_sequence<int, kScoreQueries>());

template <typename T>
void Score16(const float* const* q, int queries, const T* const* k, int64_t keys, int hd, float* scores,
             int64_t ld) {
  // Key tiles outer: a tile's rows (12 x 512 fp32 = 24 KiB at most) stay in L1 while every query passes.
  for (int64_t c = 0; c < keys; c += 2 * kKeyPairs) {
    const int kn = static_cast<int>(std::min<int64_t>(2 * kKeyPairs, keys - c));
    for (int r = 0; r < queries; r += kScoreQueries) {
      const int qn = std::min(kScoreQueries, queries - r);
      kScoreTiles16<T>[qn - 1][(kn + 1) / 2 - 1](q + r, k + c, kn, hd, scores + r * ld + c, ld);
    }
  }
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
  // Dims outer: a block's values at one tile of dims (64 keys x 96 fp32 = 24 KiB) stay in L1 while
  // every query passes.
  for (int d = 0; d < dims; d += 16 * kWideVectors) {
    const int vn = std::min(kWideVectors, (dims - d) / 16);
    for (int r = 0; r < queries; r += kWideQueries) {
      const int qn = std::min(kWideQueries, queries - r);
      kWeighTiles16<T>[qn - 1][vn - 1](p + r, v, keys, d, out + r);
    }
  }
}

}  // namespace

void ScoreWide(const float* const* q, int queries, const float* const* k, int64_t keys, int hd, float* scores,
               int64_t ld) {
  Score16(q, queries, k, keys, hd, scores, ld);
}

void ScoreWide(const float* const* q, int queries, const uint16_t* const* k, int64_t keys, int hd, float* scores,
               int64_t ld) {
  Score16(q, queries, k, keys, hd, scores, ld);
}

void WeighWide(const float* const* p, int queries, const float* const* v, int64_t keys, int dims,
               float* const* out) {
  Weigh16(p, queries, v, keys, dims, out);
}

void WeighWide(const float* const* p, int queries, const uint16_t* const* v, int64_t keys, int dims,
               float* const* out) {
  Weigh16(p, queries, v, keys, dims, out);
}

}  // namespace layerpipe::attention_tiles
