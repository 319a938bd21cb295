// Attention's tiles (attention_tiles.h) on 512-bit registers, for CPUs with AVX-512F, with the bits of
// the 8-wide tiles:
//  - scores: two keys side by side in one register (avx512_pairs.h), the query's 8 dims broadcast to
//    both halves, so each score is still an 8-lane chain over the dims and the AVX2 horizontal sum;
//  - weighted sums: 16 dims a register instead of 8, each output dim still one fused multiply-add chain
//    over the keys in position order.
// A group of a few query vectors (a global layer's decode step: 16 heads of one position) reads its
// keys and values in place, bf16 ones widened in registers (QueryPairScoreTile, UnpackWeighTile):
// packing or widening rows for so few readers cost as much as the products.
//
// Everything here executes AVX-512 instructions: attention.cc calls in only where the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "engine/cpu/attention_tiles.h"
#include "engine/cpu/avx512_pairs.h"
#include "engine/cpu/avx512_transpose.h"
#include "engine/cpu/thread_scratch.h"
#include "engine/cpu/tile_table.h"
#include "engine/model/bf16.h"

// Byte shuffles and word unpacks take AVX-512BW, 256-bit masked stores AVX-512VL: CpuSupportsAvx512F
// requires both along with F.
#define LP_AVX512BW __attribute__((target("avx512f,avx512bw,avx512vl")))

namespace layerpipe::attention_tiles {
namespace {

using avx512_pairs::BroadcastHalves;
using avx512_pairs::HalfLane;
using avx512_pairs::HalfSum;
using avx512_pairs::HalfSums;
using avx512_pairs::LoadPair;
using avx512_pairs::StorePairSums;

// Query vectors x key pairs per score tile: 24 accumulators + 6 key pairs + 1 query of the 32 zmm.
constexpr int kScoreQueries = 4;
constexpr int kKeyPairs = 6;

// Query vectors up to which a group scores by query pairs and weighs bf16 values in place; more share
// each block's packed keys and widened values (the global layer's 32 vectors of two rows took 4-6 %
// longer in place, its 16 of one row 12-18 % less before prefetching). A sliding layer's 2 vectors a
// KV head keep the row-pair kernels (5 % faster there).
constexpr int kInPlaceQueries = 16;
// Up to one tile of queries, the row-pair kernels read rows in place (ScoreTile16, WeighTile16 over
// bf16 rows); past that and up to kInPlaceQueries, the decode-shaped kernels do.
bool DecodeShaped(int queries) { return queries > kScoreQueries && queries <= kInPlaceQueries; }

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
  // More queries than a decode step has share the keys packed once (ScoresByQueryPairs takes fewer).
  const float* pairs = queries > kInPlaceQueries && hd % 8 == 0 ? PackKeyPairs(k, keys, hd) : nullptr;
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

// Decode-shaped scores: two query vectors side by side in a register (packed once per group by
// PackQueryPairs) against one key's 8 dims broadcast to both halves, read from its row: an fp32 row by
// a broadcast load, a bf16 one by a 16-byte broadcast load and one byte shuffle that puts each 128-bit
// block's 4 values into the high halves of its lanes (the exact widening). The score is ScoreTile's
// 8-lane chain and tree as ever; the keys are neither packed nor widened in memory.
// Query pairs x keys per tile: 24 accumulators + 3 keys + 1 query pair + the shuffle's control for a
// global layer's 16 vectors; fewer pairs take more keys a tile (at most 6: 12 sums to one tree), so
// that a tile's tree stays a small part of its work.
constexpr int kQueryPairs = 8;
constexpr int kPairKeys = 6;
constexpr int PairKeysFor(int pairs) { return pairs <= 3 ? 6 : pairs <= 4 ? 4 : 3; }

LP_AVX512F inline __m512 KeyHalves(const float* k, __m512i) { return BroadcastHalves(k); }
LP_AVX512BW inline __m512 KeyHalves(const uint16_t* k, __m512i widen) {
  const __m512i x = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k)));
  return _mm512_castsi512_ps(_mm512_shuffle_epi8(x, widen));
}
// The shuffle's control: 128-bit blocks 0 and 2 (the low block of each half) take values 0-3, blocks 1
// and 3 values 4-7, each value's two bytes into the high half of a lane; -1 zeroes the low halves.
LP_AVX512BW inline __m512i WidenHalvesControl() {
  alignas(64) int8_t c[64];
  for (int b = 0; b < 4; ++b) {
    for (int l = 0; l < 4; ++l) {
      const int v = 4 * (b % 2) + l;
      int8_t* lane = c + 16 * b + 4 * l;
      lane[0] = lane[1] = -1;
      lane[2] = static_cast<int8_t>(2 * v);
      lane[3] = static_cast<int8_t>(2 * v + 1);
    }
  }
  return _mm512_load_si512(c);
}

// scores[v * ld + c] = q_v · k[c] for the vectors v in [0, queries) of QP pairs (pair r: vectors 2r and
// 2r + 1, the last one absent when queries is odd; its 8-dim steps `step` floats apart) and K keys.
template <int QP, int K, typename T>
LP_AVX512BW void QueryPairScoreTile(const float* pairs, int64_t step, int queries, const T* const* k, int hd,
                                    float* scores, int64_t ld, LinePrefetch& ahead) {
  const __m512i widen = WidenHalvesControl();
  LinePrefetch feed = ahead;  // in registers while the tile runs
  __m512 acc[QP][K];
#pragma GCC unroll 8
  for (int r = 0; r < QP; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < K; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int d = 0; d < hd; d += 8) {
    feed.Next();  // a line a step: a block's 64 bf16 rows of 16 lines over its ~1400 steps
    __m512 kv[K];
#pragma GCC unroll 8
    for (int c = 0; c < K; ++c) kv[c] = KeyHalves(k[c] + d, widen);
#pragma GCC unroll 8
    for (int r = 0; r < QP; ++r) {
      __m512 qv = _mm512_load_ps(pairs + r * 16);
      asm("" : "+v"(qv));  // one load: folded into each multiply-add, it would take K loads
#pragma GCC unroll 8
      for (int c = 0; c < K; ++c) acc[r][c] = _mm512_fmadd_ps(qv, kv[c], acc[r][c]);
    }
    pairs += step;
  }
  ahead = feed;
  // Half 2c of acc[r][..] is (vector 2r, key c), half 2c + 1 (vector 2r + 1, key c): the first vector's
  // sums into lanes 0-5, the second's into lanes 8-13.
  const __m512i rows = _mm512_setr_epi32(HalfLane(0), HalfLane(2), HalfLane(4), HalfLane(6), HalfLane(8),
                                         HalfLane(10), 0, 0, HalfLane(1), HalfLane(3), HalfLane(5), HalfLane(7),
                                         HalfLane(9), HalfLane(11), 0, 0);
  const __mmask8 keys = static_cast<__mmask8>((1u << K) - 1);
#pragma GCC unroll 8
  for (int r = 0; r < QP; ++r) {
    const __m512 sums = _mm512_permutexvar_ps(rows, HalfSums(acc[r]));
    _mm256_mask_storeu_ps(scores + 2 * r * ld, keys, _mm512_castps512_ps256(sums));
    if (2 * r + 1 < queries) {
      _mm256_mask_storeu_ps(scores + (2 * r + 1) * ld, keys,
                            _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sums), 1)));
    }
  }
}

template <typename T>
struct QueryPairScoreTiles {
  template <int QP, int K>
  struct Of {
    static constexpr auto kFn = &QueryPairScoreTile<QP, K, T>;
  };
};
template <typename T>
constexpr auto kQueryPairScoreTiles = TileTable<QueryPairScoreTiles<T>::template Of, kQueryPairs, kPairKeys>();

template <typename T>
void ScoreByQueryPairs(const float* pairs, int queries, const T* const* k, int64_t keys, int hd, float* scores,
                       int64_t ld, LinePrefetch& ahead) {
  const int pair_count = (queries + 1) / 2;
  const int64_t step = int64_t{pair_count} * 16;
  const int tile_keys = PairKeysFor(std::min(pair_count, kQueryPairs));
  // Key tiles outer: each key is read once for all the pairs (all of them in one tile, up to 16 vectors).
  for (int64_t c = 0; c < keys; c += tile_keys) {
    const int kn = static_cast<int>(std::min<int64_t>(tile_keys, keys - c));
    for (int r = 0; r < pair_count; r += kQueryPairs) {
      const int qn = std::min(kQueryPairs, pair_count - r);
      kQueryPairScoreTiles<T>[qn - 1][kn - 1](pairs + r * 16, step, queries - 2 * r, k + c, hd,
                                               scores + 2 * r * ld + c, ld, ahead);
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

// Decode-shaped weighted sums over bf16 values read in place: a 64-byte load of 32 values is widened by
// interleaving its words with zeros, the low four of each 128-bit block into one register and the high
// four into another, so an accumulator holds dims {0-3, 8-11, 16-19, 24-27} (or {4-7, ...}) of its 32;
// the outputs are put into that order once a tile and back after it. Each output dim is still one
// fused chain over the keys in order: the bits of WeighTile16. One shuffle per 16 dims and key, where
// Load16 takes two.
// Query vectors per tile; 32-dim loads per tile by vectors (Q x 2R accumulators within 24).
constexpr int kUnpackQueries = 8;
constexpr int kUnpackLoads = 2;
constexpr int UnpackLoadsFor(int queries) { return queries <= 6 ? 2 : 1; }
// The weights are laid out by key for the tiles (WeightsByKey): a key's 16 vectors' weights in a line,
// each key's at a fixed offset from the last, so a tile addresses them from one pointer (with 8
// pointers of its own, the tile spilled registers: 2-3 % of the global layer's decode attention).
constexpr int kWeightsPerKey = 16;

// Lanes of the concatenation (a: 0-15, b: 16-31) of two 16-dim registers.
LP_AVX512F inline __m512i DimsIndex(int first) {  // dims first .. first + 3 of every 8
  return _mm512_setr_epi32(first, first + 1, first + 2, first + 3, first + 8, first + 9, first + 10, first + 11,
                           first + 16, first + 17, first + 18, first + 19, first + 24, first + 25, first + 26,
                           first + 27);
}
LP_AVX512F inline __m512i InterleavedIndex(int first) {  // the inverse: dims first .. first + 15 in order
  alignas(64) int32_t idx[16];
  for (int i = 0; i < 16; ++i) {
    const int dim = first + i;
    idx[i] = (dim / 8) * 4 + dim % 4 + (dim % 8 >= 4 ? 16 : 0);
  }
  return _mm512_load_si512(idx);
}

// out[r][d0 .. d0 + 32·R) += Σ_j w[j · kWeightsPerKey + r] · v[j][d0 ..] for j in [0, keys), in j order.
template <int Q, int R>
LP_AVX512BW void UnpackWeighTile(const float* w, const uint16_t* const* v, int64_t keys, int d0,
                                 float* const* out, LinePrefetch& ahead) {
  LinePrefetch feed = ahead;  // in registers while the tile runs
  const __m512i low = DimsIndex(0), high = DimsIndex(4);
  __m512 acc[Q][2 * R];
#pragma GCC unroll 8
  for (int r = 0; r < Q; ++r) {
#pragma GCC unroll 4
    for (int b = 0; b < R; ++b) {
      const __m512 a = _mm512_loadu_ps(out[r] + d0 + 32 * b), c = _mm512_loadu_ps(out[r] + d0 + 32 * b + 16);
      acc[r][2 * b] = _mm512_permutex2var_ps(a, low, c);
      acc[r][2 * b + 1] = _mm512_permutex2var_ps(a, high, c);
    }
  }
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t j = 0; j < keys; ++j) {
    feed.Next();  // a line a key: a block's 64 rows of 16 lines over its 64 x 16 x 2 key steps
    __m512 vv[2 * R];
#pragma GCC unroll 4
    for (int b = 0; b < R; ++b) {
      const __m512i raw = _mm512_loadu_si512(v[j] + d0 + 32 * b);
      vv[2 * b] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, raw));
      vv[2 * b + 1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, raw));
    }
#pragma GCC unroll 8
    for (int r = 0; r < Q; ++r) {
      const __m512 pr = _mm512_set1_ps(w[j * kWeightsPerKey + r]);
#pragma GCC unroll 8
      for (int x = 0; x < 2 * R; ++x) acc[r][x] = _mm512_fmadd_ps(pr, vv[x], acc[r][x]);
    }
  }
  ahead = feed;
  const __m512i first = InterleavedIndex(0), second = InterleavedIndex(16);
#pragma GCC unroll 8
  for (int r = 0; r < Q; ++r) {
#pragma GCC unroll 4
    for (int b = 0; b < R; ++b) {
      _mm512_storeu_ps(out[r] + d0 + 32 * b, _mm512_permutex2var_ps(acc[r][2 * b], first, acc[r][2 * b + 1]));
      _mm512_storeu_ps(out[r] + d0 + 32 * b + 16, _mm512_permutex2var_ps(acc[r][2 * b], second, acc[r][2 * b + 1]));
    }
  }
}

template <int Q, int R>
struct UnpackWeighTiles {
  static constexpr auto kFn = &UnpackWeighTile<Q, R>;
};
constexpr auto kUnpackWeighTiles = TileTable<UnpackWeighTiles, kUnpackQueries, kUnpackLoads>();

// The weights p[r][j] of up to 16 vectors at `keys` keys by key: w[j · kWeightsPerKey + r], zeros past
// `queries`; 16 keys at a time through an in-register transpose.
enum class WeighSlot { kWeightsByKey };
LP_AVX512F const float* WeightsByKey(const float* const* p, int queries, int64_t keys) {
  static_assert(kWeightsPerKey == 16, "one transpose of 16 x 16 lays out 16 keys");
  float* w = ThreadScratch<float, WeighSlot::kWeightsByKey>(static_cast<size_t>((keys + 15) / 16 * 16 * 16));
  for (int64_t j = 0; j < keys; j += 16) {
    const __mmask16 m = static_cast<__mmask16>(keys - j >= 16 ? 0xffff : (1u << (keys - j)) - 1);
    __m512i rows[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) {
      rows[r] = r < queries ? _mm512_castps_si512(_mm512_maskz_loadu_ps(m, p[r] + j)) : _mm512_setzero_si512();
    }
    avx512_transpose::Transpose16(rows);
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) _mm512_store_si512(w + (j + i) * kWeightsPerKey, rows[i]);
  }
  return w;
}

// Weigh16 for bf16 rows read in place, for up to 16 queries (WeightsByKey's layout): whole 32-dim
// loads, then a 16-dim remainder through WeighTile16.
void WeighInPlace(const float* const* p, int queries, const uint16_t* const* v, int64_t keys, int dims,
                  float* const* out, LinePrefetch& ahead) {
  const int loads = UnpackLoadsFor(std::min(queries, kUnpackQueries));
  const int whole = dims / 32 * 32;
  const float* w = whole > 0 ? WeightsByKey(p, queries, keys) : nullptr;
  // Dims outer: a block's values at one tile of dims (64 keys x 32-64 bf16, 4-8 KiB) stay in L1 while
  // every query passes.
  for (int d = 0; d < whole; d += 32 * loads) {
    const int rn = std::min(loads, (whole - d) / 32);
    for (int r = 0; r < queries; r += kUnpackQueries) {
      const int qn = std::min(kUnpackQueries, queries - r);
      kUnpackWeighTiles[qn - 1][rn - 1](w + r, v, keys, d, out + r, ahead);
    }
  }
  if (whole == dims) return;
  for (int r = 0; r < queries; r += kWideQueries) {
    const int qn = std::min(kWideQueries, queries - r);
    kWeighTiles16<uint16_t>[qn - 1][0](p + r, v, keys, whole, out + r);
  }
}

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

bool ScoresByQueryPairs(int queries, int hd) { return DecodeShaped(queries) && hd % 8 == 0; }
bool ScoreWideTakesBf16(int queries, int hd) { return queries <= kScoreQueries || hd % 8 == 0; }
bool WeighWideReadsBf16InPlace(int queries) { return queries <= kInPlaceQueries; }

int64_t QueryPairFloats(int queries, int hd) { return int64_t{(queries + 1) / 2} * 2 * hd; }

LP_AVX512F void PackQueryPairs(const float* const* q, int queries, int hd, float* out) {
  const int64_t step = int64_t{(queries + 1) / 2} * 16;  // the pairs of one 8-dim step side by side
  for (int r = 0; r < queries; r += 2) {
    const float* second = q[std::min(r + 1, queries - 1)];  // an odd last vector pairs with itself
    for (int d = 0; d < hd; d += 8) _mm512_store_ps(out + d / 8 * step + r * 8, LoadPair(q[r] + d, second + d));
  }
}

void ScoreQueryPairs(const float* pairs, int queries, const float* const* k, int64_t keys, int hd, float* scores,
                     int64_t ld, LinePrefetch& ahead) {
  ScoreByQueryPairs(pairs, queries, k, keys, hd, scores, ld, ahead);
}

void ScoreQueryPairs(const float* pairs, int queries, const uint16_t* const* k, int64_t keys, int hd,
                     float* scores, int64_t ld, LinePrefetch& ahead) {
  ScoreByQueryPairs(pairs, queries, k, keys, hd, scores, ld, ahead);
}

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
               float* const* out, LinePrefetch&) {
  Weigh16(p, queries, v, keys, dims, out);
}

void WeighWide(const float* const* p, int queries, const uint16_t* const* v, int64_t keys, int dims,
               float* const* out, LinePrefetch& ahead) {
  if (DecodeShaped(queries)) {
    WeighInPlace(p, queries, v, keys, dims, out, ahead);
  } else {
    Weigh16(p, queries, v, keys, dims, out);
  }
}

}  // namespace layerpipe::attention_tiles
