// Attention's products on vdpbf16ps (attention_dot.h). Keys are packed a block at a time with 16 keys
// side by side (one fp32 lane each) and their dims in pairs, so a query's bf16 pair broadcast against
// a packed register advances 16 scores by two dims; values are packed in pairs of keys, so a pair of
// weights broadcast against a packed register advances 16 output dims by two keys. Packing reads every
// row once per block for all the query vectors of a group. A group of 9-16 vectors (a global layer's
// decode step) is scored the other way round: its vectors lie in the lanes and the keys are read in
// place (ScoreKeysQueryLanes).
//
// Everything here executes AVX-512 BF16 instructions: attention.cc calls in only where the CPU has them.
#include "engine/cpu/attention_dot.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>

#include "engine/cpu/avx512_transpose.h"
#include "engine/cpu/thread_scratch.h"
#include "engine/cpu/tile_table.h"

#define LP_BF16_DOT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

// glibc's libmvec: expf on 16 lanes (AVX-512), each lane computed alone.
extern "C" __m512 _ZGVeN16v_expf(__m512);

namespace layerpipe::attention_dot {
namespace {

constexpr int kLanes = 16;

// A mask of the first n lanes of 16 (n in [0, 16] or more).
LP_BF16_DOT inline __mmask16 FirstLanes(int64_t n) {
  return n >= kLanes ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1);
}
// Keys packed together: 64 keys of a 512-wide head are 64 KiB of pairs, in L2 while every vector of
// the group passes.
constexpr int64_t kBlock = 64;
static_assert(kBlock % (2 * kLanes) == 0, "a block holds whole pairs and whole groups of keys");

// Query vectors x groups of 16 keys per score tile, query vectors x 16-dim vectors per weighting tile:
// 24 accumulators and the operands of one step within the 32 zmm registers. Scores: 6 broadcasts of
// a query pair and 4 loads feed 24 products; 12 x 2 (12 broadcasts) ran 40 % slower, 3 x 8 10 %
// (global layer, 4096 context). Weighted sums the same way: 6 broadcasts of a pair of weights and 4
// loads of 16 dims (4 x 16 dims divide both head widths evenly); 3 x 8 dims (3 broadcasts, 8 loads) took
// 7-9 % longer over a 512-row chunk at 4096 context, global and sliding layers alike (2-core Zen 5 VM).
constexpr int kScoreVectors = 6;
constexpr int kScoreGroups = kBlock / kLanes;  // a tile takes all of a block's keys
constexpr int kWeighVectors = 6;
constexpr int kWeighDims = 4;

enum class Slot { kKeys, kValues, kWeights, kQueryPairs, kKeyRows };

int Pairs(int hd) { return hd / 2; }
int64_t PaddedDims(int hd) { return (hd + kLanes - 1) / kLanes * kLanes; }
// Values from one packed pair of keys to the next: one cache line past the padded dims. A 512-wide
// head's 2 KiB rows would put a weighting tile's dims of every pair into the same few L1 sets (16 lines
// a set, more than its ways), so the tile would not stay in L1 while the vectors pass; the extra line
// spreads them (global layer, 2-core Zen 5 VM: 512-row prefill at 4096 context 138-140 -> 122-123 ms,
// decode at 32768 4.2 -> 3.9 ms).
int64_t ValueStride(int hd) { return PaddedDims(hd) + kLanes; }

// One key's or value's row: the cache's (bf16), or the chunk's own (fp32 holding bf16 values); neither
// reads as zeros.
struct Row {
  const uint16_t* bf16 = nullptr;
  const float* f32 = nullptr;
};

// The rows of K (which = 0) or V (which = 1) of one KV head by absolute position: the chunk's own at and
// after pos0, the cache's before. Looked up once a block (a cache row's place takes divisions).
struct Rows {
  const AttentionChunk& c;
  int which;
  int64_t koff;
  Row At(int64_t pos) const {
    if (pos >= c.pos0) return {nullptr, (which == 0 ? c.k_new : c.v_new) + (pos - c.pos0) * c.kv_stride + koff};
    return {(which == 0 ? c.cache->K<uint16_t>(pos) : c.cache->V<uint16_t>(pos)) + koff, nullptr};
  }
};

// 32 values [d, d + count) of a row as bf16 (zeros past count, count in [0, 32]): 16 dim pairs for
// the keys' packing, one register of a value row for the values'.
LP_BF16_DOT inline __m512i Load32(const Row& row, int64_t d, int count) {
  const uint32_t m = count >= 32 ? 0xffffffffu : (1u << count) - 1;
  if (row.f32 != nullptr) {
    const __m512 lo = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m), row.f32 + d);
    const __m512 hi = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m >> 16), row.f32 + d + kLanes);
    return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));  // exact: the values are bf16 already
  }
  if (row.bf16 == nullptr) return _mm512_setzero_si512();
  return _mm512_maskz_loadu_epi16(m, row.bf16 + d);
}

// Word indices that interleave two registers of 32 bf16 (a: 0-31, b: 32-63) into pairs
// (a[i], b[i]): for i in [0, 16), then in [16, 32).
constexpr auto PairIndices(int first) {
  std::array<uint16_t, 32> idx{};
  for (int i = 0; i < 16; ++i) {
    idx[2 * i] = static_cast<uint16_t>(first + i);
    idx[2 * i + 1] = static_cast<uint16_t>(32 + first + i);
  }
  return idx;
}
alignas(64) constexpr std::array<uint16_t, 32> kLowPairs = PairIndices(0);
alignas(64) constexpr std::array<uint16_t, 32> kHighPairs = PairIndices(16);

using avx512_transpose::Transpose16;

// Keys [b, b + n) as out[group][pair][lane]: key b + 16·group + lane's dims (2·pair, 2·pair + 1); lanes
// past n hold zeros. The rows of the 16 keys after each group (up to e) are prefetched while it is
// packed: 16 rows read a line at a time each are 16 streams that the hardware prefetchers miss.
// A group of 16 cache rows (every group of a decode's keys) loads whole registers without a check per
// row, and rows are looked up a group at a time rather than into a zeroed array a block. With the
// unrolled transpose, a sliding layer's one-row decode (1024 keys, 2-core Zen 5 VM, alternating
// binaries) went 0.24-0.26 -> 0.17-0.18 ms: there packing is most of the work (2 query vectors a head).
LP_BF16_DOT void PackKeys(const Rows& rows, int64_t b, int64_t n, int64_t e, int hd, uint32_t* out) {
  const int pairs = Pairs(hd);
  const auto lookup = [&rows, e](int64_t pos) { return pos < e ? rows.At(pos) : Row{}; };
  Row group[kLanes], next[kLanes];
  for (int i = 0; i < kLanes; ++i) next[i] = lookup(b + i);
  for (int64_t g = 0; g * kLanes < n; ++g) {
    const int keys = static_cast<int>(std::min<int64_t>(kLanes, n - g * kLanes));
    bool cached = keys == kLanes;
    for (int i = 0; i < kLanes; ++i) {
      group[i] = i < keys ? next[i] : Row{};
      next[i] = lookup(b + (g + 1) * kLanes + i);
      cached = cached && group[i].bf16 != nullptr;
    }
    uint32_t* dst = out + g * pairs * kLanes;
    for (int dp = 0; dp < pairs; dp += kLanes) {
      const int count = std::min(kLanes, pairs - dp);
      for (int i = 0; i < kLanes; ++i) {
        if (next[i].bf16 != nullptr) _mm_prefetch(reinterpret_cast<const char*>(next[i].bf16 + 2 * dp), _MM_HINT_T0);
      }
      __m512i r[kLanes];
      if (cached && count == kLanes) {
#pragma GCC unroll 16
        for (int i = 0; i < kLanes; ++i) r[i] = _mm512_loadu_si512(group[i].bf16 + 2 * dp);
        Transpose16(r);
#pragma GCC unroll 16
        for (int i = 0; i < kLanes; ++i) _mm512_store_si512(dst + (dp + i) * kLanes, r[i]);
        continue;
      }
      for (int i = 0; i < kLanes; ++i) r[i] = Load32(group[i], 2 * dp, 2 * count);
      Transpose16(r);
      for (int i = 0; i < count; ++i) _mm512_store_si512(dst + (dp + i) * kLanes, r[i]);
    }
  }
}

// scores[r * ld + 16·g + lane] for Q vectors and G groups of packed keys, `keys` of them real.
template <int Q, int G>
LP_BF16_DOT void ScoreTile(const uint16_t* q16, int64_t q_ld, const uint32_t* packed, int pairs, int keys,
                           float* scores, int64_t ld) {
  __m512 acc[Q][G];
#pragma GCC unroll 8
  for (int r = 0; r < Q; ++r)
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  const int64_t group_stride = int64_t{pairs} * kLanes;
  for (int dp = 0; dp < pairs; ++dp) {
    __m512bh k[G];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) k[g] = reinterpret_cast<__m512bh>(_mm512_load_si512(packed + g * group_stride + dp * kLanes));
#pragma GCC unroll 8
    for (int r = 0; r < Q; ++r) {
      const auto* q32 = reinterpret_cast<const uint32_t*>(q16 + r * q_ld);
      const __m512bh qv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(q32[dp])));
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) acc[r][g] = _mm512_dpbf16_ps(acc[r][g], qv, k[g]);
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    const __mmask16 m = FirstLanes(keys - g * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < Q; ++r) _mm512_mask_storeu_ps(scores + r * ld + g * kLanes, m, acc[r][g]);
  }
}

template <int Q, int G>
struct ScoreTiles {
  static constexpr auto kFn = &ScoreTile<Q, G>;
};
constexpr auto kScoreTiles = TileTable<ScoreTiles, kScoreVectors, kScoreGroups>();

// Values [b, b + 2·pairs) as out[pair · ValueStride(hd) + d]: key b + 2·pair's dim d in the low half of a
// 32-bit lane, the next key's in the high half; keys outside [a, e) and dims past hd are zeros. The rows
// kValuesAhead keys on are prefetched meanwhile (the hardware prefetchers fell behind here).
constexpr int kValuesAhead = 8;
LP_BF16_DOT void PackValues(const Rows& rows, int64_t b, int64_t pairs, int64_t a, int64_t e, int hd,
                            uint32_t* out) {
  const int64_t ld = ValueStride(hd), dims = PaddedDims(hd);
  const __m512i low = _mm512_load_si512(kLowPairs.data()), high = _mm512_load_si512(kHighPairs.data());
  Row row[kBlock + kValuesAhead];
  for (int64_t i = 0; i < 2 * pairs + kValuesAhead; ++i) row[i] = b + i >= a && b + i < e ? rows.At(b + i) : Row{};
  for (int64_t jp = 0; jp < pairs; ++jp) {
    const Row& lo = row[2 * jp];
    const Row& hi = row[2 * jp + 1];
    const Row* ahead = row + 2 * jp + kValuesAhead;
    for (int64_t d = 0; d < dims; d += 2 * kLanes) {
      for (int i = 0; i < 2; ++i) {  // a cache line of each of the two rows ahead
        if (ahead[i].bf16 != nullptr) _mm_prefetch(reinterpret_cast<const char*>(ahead[i].bf16 + d), _MM_HINT_T0);
      }
      const int count = static_cast<int>(std::clamp<int64_t>(hd - d, 0, 2 * kLanes));
      const __m512i l = Load32(lo, d, count), h = Load32(hi, d, count);
      _mm512_store_si512(out + jp * ld + d, _mm512_permutex2var_epi16(l, low, h));
      if (d + kLanes < dims) _mm512_store_si512(out + jp * ld + d + kLanes, _mm512_permutex2var_epi16(l, high, h));
    }
  }
}

// out[r][d0 .. d0 + 16·V) += Σ_pair p[r][pair] · value pair, in pair order (dims past hd untouched).
template <int Q, int V>
LP_BF16_DOT void WeighTile(const uint32_t* p32, int64_t p_ld, const uint32_t* packed, int64_t ld, int64_t pairs,
                           int64_t d0, int hd, float* const* out) {
  __mmask16 m[V];
  __m512 acc[Q][V];
#pragma GCC unroll 8
  for (int c = 0; c < V; ++c) {
    m[c] = FirstLanes(std::max<int64_t>(0, hd - (d0 + c * kLanes)));
  }
#pragma GCC unroll 8
  for (int r = 0; r < Q; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < V; ++c) acc[r][c] = _mm512_maskz_loadu_ps(m[c], out[r] + d0 + c * kLanes);
  for (int64_t jp = 0; jp < pairs; ++jp) {
    __m512bh v[V];
#pragma GCC unroll 8
    for (int c = 0; c < V; ++c) v[c] = reinterpret_cast<__m512bh>(_mm512_load_si512(packed + jp * ld + d0 + c * kLanes));
#pragma GCC unroll 8
    for (int r = 0; r < Q; ++r) {
      const __m512bh pv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(p32[r * p_ld + jp])));
#pragma GCC unroll 8
      for (int c = 0; c < V; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], pv, v[c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < Q; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < V; ++c) _mm512_mask_storeu_ps(out[r] + d0 + c * kLanes, m[c], acc[r][c]);
}

template <int Q, int V>
struct WeighTiles {
  static constexpr auto kFn = &WeighTile<Q, V>;
};
constexpr auto kWeighTiles = TileTable<WeighTiles, kWeighVectors, kWeighDims>();

// out[v][jp] = the bf16 pair (p[v][2 jp], p[v][2 jp + 1]) for jp < pairs (p holds bf16 values).
LP_BF16_DOT void PackWeights(const float* p, int64_t ld, int vectors, int64_t pairs, uint32_t* out) {
  for (int v = 0; v < vectors; ++v) {
    const float* src = p + v * ld;
    uint32_t* dst = out + v * pairs;
    for (int64_t jp = 0; jp < pairs; jp += kLanes) {
      const int64_t n = std::min<int64_t>(2 * kLanes, 2 * (pairs - jp));
      const uint32_t m = n >= 2 * kLanes ? 0xffffffffu : (1u << n) - 1;
      const __m512 lo = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m), src + 2 * jp);
      const __m512 hi = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m >> 16), src + 2 * jp + kLanes);
      _mm512_mask_storeu_epi32(dst + jp, static_cast<__mmask16>(m == 0xffffffffu ? 0xffff : (1u << (n / 2)) - 1),
                               reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
  }
}

// Query vectors that sit in the lanes of one register: a decode step's vectors of a global layer's one
// KV head (all the heads of one position).
constexpr int kLaneQueries = kLanes;
// Pairs ahead of its reading point a row is prefetched, and lines of the next group's rows asked for
// early.
constexpr int kRowAhead = 64;
constexpr int kFirstLines = 8;

// out[p * 16 + v] = pair p of query vector v (zeros past `vectors`), for p < pairs.
LP_BF16_DOT void PackQueries(const uint16_t* q16, int64_t q_ld, int vectors, int pairs, uint32_t* out) {
  for (int dp = 0; dp < pairs; dp += kLanes) {
    const int count = std::min(kLanes, pairs - dp);
    const __mmask32 m = count >= kLanes ? 0xffffffffu : (1u << (2 * count)) - 1;
    __m512i r[kLanes];
    for (int v = 0; v < kLanes; ++v) r[v] = v < vectors ? _mm512_maskz_loadu_epi16(m, q16 + v * q_ld + 2 * dp) : _mm512_setzero_si512();
    Transpose16(r);
    for (int i = 0; i < count; ++i) _mm512_store_si512(out + (dp + i) * kLanes, r[i]);
  }
}

// ScoreKeys for at most 16 query vectors: the vectors in the lanes and each key's pairs broadcast, so
// the keys are read in place rather than transposed into blocks (a global layer's decode at 32768
// context spent 29 % of its attention in PackKeys). The same bits: vdpbf16ps's products are exact and
// it sums them in element order whichever operand holds the query. Global layer, one row, 2-core Zen 5
// VM, alternating calls: 32768 context 4.0-4.2 -> 3.3-3.5 ms, 4096 0.41 -> 0.33 ms.
LP_BF16_DOT void ScoreKeysQueryLanes(const Rows& rows, int hd, const uint16_t* q16, int64_t q_ld, int vectors,
                                     int64_t a, int64_t e, float* scores, int64_t ld) {
  const int pairs = Pairs(hd);
  uint32_t* qp = ThreadScratch<uint32_t, Slot::kQueryPairs>(static_cast<size_t>(pairs) * kLanes);
  PackQueries(q16, q_ld, vectors, pairs, qp);
  // The chunk's own keys (fp32) as bf16 rows, whole registers of 32 values each.
  const int64_t own_ld = (hd + 2 * kLanes - 1) / (2 * kLanes) * (2 * kLanes);
  uint16_t* own = ThreadScratch<uint16_t, Slot::kKeyRows>(static_cast<size_t>(kLanes * own_ld));
  // Rows of the keys [b, b + 16) and of the next 16 (looked up once each; none past e).
  Row group[kLanes], next[kLanes];
  for (int k = 0; k < kLanes; ++k) next[k] = a + k < e ? rows.At(a + k) : Row{};
  for (int64_t b = a; b < e; b += kLanes) {
    const int n = static_cast<int>(std::min<int64_t>(kLanes, e - b));
    for (int k = 0; k < kLanes; ++k) {
      group[k] = next[k];
      next[k] = b + kLanes + k < e ? rows.At(b + kLanes + k) : Row{};
    }
    const uint32_t* key[kLanes];
    for (int k = 0; k < n; ++k) {
      const Row& row = group[k];
      if (row.bf16 != nullptr) {
        key[k] = reinterpret_cast<const uint32_t*>(row.bf16);
      } else {
        uint16_t* dst = own + k * own_ld;
        for (int d = 0; d < hd; d += 2 * kLanes) _mm512_storeu_si512(dst + d, Load32(row, d, std::min(2 * kLanes, hd - d)));
        key[k] = reinterpret_cast<const uint32_t*>(dst);
      }
    }
    for (int k = n; k < kLanes; ++k) key[k] = key[n - 1];  // lanes past n repeat the last key, not stored
    // The next group's first lines are asked for over this group's first steps, and every step asks
    // for a line of one of this group's rows kRowAhead pairs on, so that each row's stream stays that
    // far ahead (16 rows read 4 bytes a step are more streams than the prefetchers follow).
    const char* ahead[kLanes];
    for (int k = 0; k < kLanes; ++k) ahead[k] = reinterpret_cast<const char*>(next[k].bf16);
    __m512 acc[kLanes];
#pragma GCC unroll 16
    for (int k = 0; k < kLanes; ++k) acc[k] = _mm512_setzero_ps();
    for (int p = 0; p < pairs; ++p) {
      _mm_prefetch(reinterpret_cast<const char*>(key[p & (kLanes - 1)] + (p & ~(kLanes - 1)) + kRowAhead), _MM_HINT_T0);
      if (p < kLanes * kFirstLines && ahead[p / kFirstLines] != nullptr) {
        _mm_prefetch(ahead[p / kFirstLines] + 64 * (p % kFirstLines), _MM_HINT_T0);
      }
      const __m512bh qv = reinterpret_cast<__m512bh>(_mm512_load_si512(qp + p * kLanes));
#pragma GCC unroll 16
      for (int k = 0; k < kLanes; ++k) {
        acc[k] = _mm512_dpbf16_ps(acc[k], reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(key[k][p]))), qv);
      }
    }
    // acc[k] lane v = score of key b + k for vector v; out[v] lane k after the transpose.
    __m512i t[kLanes];
#pragma GCC unroll 16
    for (int k = 0; k < kLanes; ++k) t[k] = _mm512_castps_si512(acc[k]);
    Transpose16(t);
    const __mmask16 m = FirstLanes(n);
    for (int v = 0; v < vectors; ++v) _mm512_mask_storeu_ps(scores + v * ld + (b - a), m, _mm512_castsi512_ps(t[v]));
  }
}

// Each lane rounded to the nearest bf16 value, ties to even, a NaN kept quiet (bf16.h's RoundToBf16).
LP_BF16_DOT inline __m512 RoundToBf16Lanes(__m512 v) {
  const __m512i b = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), lsb);
  r = _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), b, _mm512_set1_epi32(0x00400000));
  return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

}  // namespace

// The softmax was 13 % of a global layer's 64-row prefill at 32768 context on 256-bit registers (8-lane
// exp, bf16 rounding and double sums); on 512-bit ones 4-7 % less attention time (2-core Zen 5 VM).
LP_BF16_DOT void SegmentSoftmax(float* s, int64_t keys, int64_t lo, int64_t hi, float* max, double* sum) {
  std::fill(s, s + lo, 0.0f);
  std::fill(s + hi + 1, s + keys, 0.0f);
  float* x = s + lo;
  const int64_t n = hi - lo + 1;
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < n; i += kLanes) {
    vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(vmax, FirstLanes(n - i), x + i));
  }
  const float mx = _mm512_reduce_max_ps(vmax);
  const __m512 vm = _mm512_set1_ps(mx);
  __m512d lo_sum = _mm512_setzero_pd(), hi_sum = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 m = FirstLanes(n - i);
    // Lanes past n get exp(0) and are neither stored nor summed.
    const __m512 shifted = _mm512_sub_ps(_mm512_mask_loadu_ps(vm, m, x + i), vm);
    const __m512 e = _mm512_maskz_mov_ps(m, RoundToBf16Lanes(_ZGVeN16v_expf(shifted)));
    _mm512_mask_storeu_ps(x + i, m, e);
    lo_sum = _mm512_add_pd(lo_sum, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    hi_sum = _mm512_add_pd(hi_sum, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  *max = mx;
  *sum = _mm512_reduce_add_pd(_mm512_add_pd(lo_sum, hi_sum));
}

LP_BF16_DOT void ScoreKeys(const AttentionChunk& c, int64_t koff, int hd, const uint16_t* q16, int64_t q_ld,
                           int vectors, int64_t a, int64_t e, float* scores, int64_t ld) {
  const Rows rows{c, 0, koff};
  if (vectors > kLaneQueries / 2 && vectors <= kLaneQueries) {
    ScoreKeysQueryLanes(rows, hd, q16, q_ld, vectors, a, e, scores, ld);
    return;
  }
  const int pairs = Pairs(hd);
  uint32_t* packed = ThreadScratch<uint32_t, Slot::kKeys>(static_cast<size_t>(kBlock * pairs));
  for (int64_t b = a; b < e; b += kBlock) {
    const int n = static_cast<int>(std::min(kBlock, e - b));
    PackKeys(rows, b, n, e, hd, packed);
    const int groups = (n + kLanes - 1) / kLanes;
    for (int r = 0; r < vectors; r += kScoreVectors) {
      const int qn = std::min(kScoreVectors, vectors - r);
      kScoreTiles[qn - 1][groups - 1](q16 + r * q_ld, q_ld, packed, pairs, n, scores + r * ld + (b - a), ld);
    }
  }
}

LP_BF16_DOT void WeighValues(const AttentionChunk& c, int64_t koff, int hd, const float* p, int64_t ld, int vectors,
                             int64_t a, int64_t e, float* const* out) {
  const Rows rows{c, 1, koff};
  const int64_t a0 = a & ~int64_t{1}, end = (e + 1) & ~int64_t{1};
  const int64_t stride = ValueStride(hd);
  uint32_t* packed = ThreadScratch<uint32_t, Slot::kValues>(static_cast<size_t>(kBlock / 2 * stride));
  uint32_t* weights = ThreadScratch<uint32_t, Slot::kWeights>(static_cast<size_t>(vectors * kBlock / 2));
  for (int64_t b = a0; b < end; b += kBlock) {
    const int64_t pairs = std::min(kBlock, end - b) / 2;
    PackValues(rows, b, pairs, a, e, hd, packed);
    PackWeights(p + (b - a0), ld, vectors, pairs, weights);
    // Dims outer: the block's pairs at one tile of dims (32 pairs x 64 dims = 8 KiB) stay in L1 while
    // every vector passes.
    for (int64_t d = 0; d < hd; d += kLanes * kWeighDims) {
      const int vn = static_cast<int>(std::min<int64_t>(kWeighDims, (hd - d + kLanes - 1) / kLanes));
      for (int r = 0; r < vectors; r += kWeighVectors) {
        const int qn = std::min(kWeighVectors, vectors - r);
        kWeighTiles[qn - 1][vn - 1](weights + r * pairs, pairs, packed, stride, pairs, d, hd, out + r);
      }
    }
  }
}

}  // namespace layerpipe::attention_dot
