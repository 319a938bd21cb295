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
#include <cstdint>

#include "engine/cpu/attention_tiles.h"
#include "engine/cpu/avx512_pairs.h"
#include "engine/cpu/thread_scratch.h"
#include "engine/cpu/tile_table.h"
#include "engine/model/bf16.h"

namespace layerpipe::attention_tiles {
namespace {

using avx512_pairs::BroadcastHalves;
using avx512_pairs::HalfSum;
using avx512_pairs::LoadPair;
using avx512_pairs::StorePairSums;

// Query vectors x key pairs per score tile: 24 accumulators + 6 key pairs + 1 query of the 32 zmm.
constexpr int kScoreQueries = 4;
constexpr int kKeyPairs = 6;

// Key sources: Load(c, d) is pair c's two keys at dims [d, d + 8), side by side.
// Rows in place: two half loads and a join per pair and step (and the widening for bf16).
template <typename T, int P>
struct RowPairs {
  const T* lo[P];
  const T* hi[P];
  LP_AVX512F __m512 Load(int c, int d) const { return LoadPair(lo[c] + d, hi[c] + d); }
};
// Packed by PackKeyPairs: one aligned load. The joins and widenings run on port 5, which on these CPUs
// also issues half of the 512-bit multiply-adds, so in place they cost a fifth of the tile's time.
struct PackedPairs {
  const float* pairs;
  int64_t stride;  // floats from one pair to the next: 2 * head_dim
  LP_AVX512F __m512 Load(int c, int d) const { return _mm512_load_ps(pairs + c * stride + 2 * d); }
};

// acc[r][c] += q[r][d ..] x pair c over the whole vectors of dims [0, hd8).
template <int Q, int P, typename Src>
LP_AVX512F inline void AccumulateScores(const float* const* q, const Src& k, int hd8, __m512 (&acc)[Q][P]) {
#pragma GCC unroll 8
  for (int r = 0; r < Q; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < P; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int d = 0; d < hd8; d += 8) {
    __m512 kv[P];
#pragma GCC unroll 8
    for (int c = 0; c < P; ++c) kv[c] = k.Load(c, d);
#pragma GCC unroll 8
    for (int r = 0; r < Q; ++r) {
      const __m512 qv = BroadcastHalves(q[r] + d);
#pragma GCC unroll 8
      for (int c = 0; c < P; ++c) acc[r][c] = _mm512_fmadd_ps(qv, kv[c], acc[r][c]);
    }
  }
}

// scores[r * ld + c] = q[r] · k[c] for Q query vectors and the first `keys` (<= 2P) keys, read in
// place; a pair's missing second key reads the first again and is not stored.
template <int Q, int P, typename T>
LP_AVX512F void ScoreTile16(const float* const* q, const T* const* k, int keys, int hd, float* scores, int64_t ld) {
  RowPairs<T, P> src;
#pragma GCC unroll 8
  for (int c = 0; c < P; ++c) {
    src.lo[c] = k[2 * c];
    src.hi[c] = k[std::min(2 * c + 1, keys - 1)];
  }
  __m512 acc[Q][P];
  const int hd8 = hd / 8 * 8;
  AccumulateScores(q, src, hd8, acc);
  if (hd8 == hd) {
#pragma GCC unroll 8
    for (int r = 0; r < Q; ++r) StorePairSums(acc[r], keys, scores + r * ld);
    return;
  }
  for (int r = 0; r < Q; ++r) {
    for (int c = 0; c < 2 * P && c < keys; ++c) {
      scores[r * ld + c] = ScoreTail(HalfSum(acc[r][c / 2], c % 2), q[r], k[c], hd8, hd);
    }
  }
}

// The same from keys packed by PackKeyPairs (hd a multiple of 8).
template <int Q, int P>
LP_AVX512F void PackedScoreTile(const float* const* q, const float* pairs, int keys, int hd, float* scores,
                                int64_t ld) {
  __m512 acc[Q][P];
  AccumulateScores(q, PackedPairs{pairs, 2 * hd}, hd, acc);
#pragma GCC unroll 8
  for (int r = 0; r < Q; ++r) StorePairSums(acc[r], keys, scores + r * ld);
}

// keys [0, n) as pairs for PackedPairs: pair p's 8-dim steps back to back, 16 floats each (key 2p in
// the low half, 2p + 1 in the high half; a missing last key repeats the one before).
enum class AttentionSlot { kKeyPairs };
template <typename T>
LP_AVX512F const float* PackKeyPairs(const T* const* k, int64_t n, int hd) {
  float* out = ThreadScratch<float, AttentionSlot::kKeyPairs>(static_cast<size_t>((n + 1) / 2 * 2 * hd));
  for (int64_t p = 0; p < (n + 1) / 2; ++p) {
    const T* lo = k[2 * p];
    const T* hi = k[std::min(2 * p + 1, n - 1)];
    float* dst = out + p * 2 * hd;
    for (int d = 0; d < hd; d += 8) _mm512_store_ps(dst + 2 * d, LoadPair(lo + d, hi + d));
  }
  return out;
}

template <typename T>
struct RowScoreTiles {
  template <int Q, int P>
  struct Of {
    static constexpr auto kFn = &ScoreTile16<Q, P, T>;
  };
};
template <int Q, int P>
struct PackedScoreTiles {
  static constexpr auto kFn = &PackedScoreTile<Q, P>;
};
template <typename T>
constexpr auto kScoreTiles16 = TileTable<RowScoreTiles<T>::template Of, kScoreQueries, kKeyPairs>();
constexpr auto kPackedScoreTiles = TileTable<PackedScoreTiles, kScoreQueries, kKeyPairs>();

template <typename T>
void Score16(const float* const* q, int queries, const T* const* k, int64_t keys, int hd, float* scores,
             int64_t ld) {
  const float* pairs = ScoreWidePacksKeys(queries, hd) ? PackKeyPairs(k, keys, hd) : nullptr;
  // Key tiles outer: a tile's rows (12 x 512 fp32 = 24 KiB at most) stay in L1 while every query passes.
  for (int64_t c = 0; c < keys; c += 2 * kKeyPairs) {
    const int kn = static_cast<int>(std::min<int64_t>(2 * kKeyPairs, keys - c));
    for (int r = 0; r < queries; r += kScoreQueries) {
      const int qn = std::min(kScoreQueries, queries - r);
      if (pairs != nullptr) {
        kPackedScoreTiles[qn - 1][(kn + 1) / 2 - 1](q + r, pairs + c * hd, kn, hd, scores + r * ld + c, ld);
      } else {
        kScoreTiles16<T>[qn - 1][(kn + 1) / 2 - 1](q + r, k + c, kn, hd, scores + r * ld + c, ld);
      }
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
struct WeighTiles16 {
  template <int Q, int V>
  struct Of {
    static constexpr auto kFn = &WeighTile16<Q, V, T>;
  };
};
template <typename T>
constexpr auto kWeighTiles16 =
    TileTable<WeighTiles16<T>::template Of, kWideQueries, kWideVectors>();

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

// Packed once when more than one tile of queries reads the keys (and no scalar tail needs the rows).
bool ScoreWidePacksKeys(int queries, int hd) { return queries > kScoreQueries && hd % 8 == 0; }

void ScoreWide(const float* const* q, int queries, const float* const* k, int64_t keys, int hd, float* scores,
               int64_t ld) {
  Score16(q, queries, k, keys, hd, scores, ld);
}

void ScoreWide(const float* const* q, int queries, const uint16_t* const* k, int64_t keys, int hd, float* scores,
               int64_t ld) {
  Score16(q, queries, k, keys, hd, scores, ld);
}

LP_AVX512F void WidenWide(const uint16_t* const* rows, int64_t n, int hd, float* out, int64_t ld) {
  for (int64_t j = 0; j < n; ++j) {
    int d = 0;
    for (; d + 16 <= hd; d += 16) _mm512_storeu_ps(out + j * ld + d, Load16(rows[j] + d));
    Bf16ToF32Row(rows[j] + d, out + j * ld + d, hd - d);
  }
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
