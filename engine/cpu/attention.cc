// Attention as tiled matrix work: a group of query vectors (rows × the heads of one GQA group) is
// scored against blocks of keys with register tiles (attention_tiles.h), segment by segment of keys;
// within a segment the scores go through an exact two-pass softmax per query vector and the weights
// multiply blocks of values the same way; the segments' partial results are then combined
// (flash-decoding's arithmetic, whether or not the segments ran on different threads).
// bf16 key and value rows are widened to fp32 once per block when several tiles of queries reuse
// them (a decode step's few vectors widen them in registers instead), or, where the matmuls run on
// vdpbf16ps, multiplied as bf16 pairs (attention_dot.h). Every score, weight and output value is
// computed by the same arithmetic whatever the group, block or tile it falls in, so results depend
// only on a query and the keys it sees.
#include "engine/cpu/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>

#include "engine/cpu/attention_dot.h"
#include "engine/cpu/attention_tiles.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/thread_scratch.h"
#include "engine/cpu/tile_table.h"
#include "engine/model/bf16.h"

// glibc's libmvec: expf on 8 lanes (AVX2), each lane computed alone, within 3 ulp of exp.
extern "C" __m256 _ZGVdN8v_expf(__m256);

namespace layerpipe {
namespace {

using namespace attention_tiles;

// Keys whose rows are handled (and, for bf16, widened) together: 64 × 512 fp32 = 128 KiB, in L2
// (blocks of 16, 32 and 128 keys measured 3-15 % slower, prefill and decode).
constexpr int64_t kKeyBlock = 64;

// Query vectors AttendHeads takes together: each block of keys is packed (and of values widened) once
// for all of them; with the 16 heads of the global layer's one KV head in groups of 2 rows (32
// vectors), packing and widening took a fifth of the time; 256 vectors (16 rows) rather than 128 took
// the global layer's bf16-pair prefill at 16384 context from 573 to 534-546 ms (2-core Zen 5 VM).
constexpr int64_t kMaxGroupVectors = 256;

// Floats from one widened row to the next: a head_dim of 256 or 512 floats is a multiple of 4 KiB's
// worth of L1 sets, so the same dims of a block's rows would all fall into a few sets (more rows than
// ways) and a tile of them would not stay in L1 while the queries pass; one more cache line a row
// spreads them over all sets.
constexpr int64_t WideRowStride(int hd) { return hd + 16; }
// Widened rows live in 64-byte aligned thread scratch, so the tiles' 64-byte loads of them never
// straddle two cache lines.
enum class AttentionScratchSlot { kWideRows };

// The last key query position p sees: itself, or the end of the image block it lies in.
int64_t LastKey(const AttentionChunk& c, int64_t p) {
  for (const PositionRange& b : c.image_blocks) {
    if (p < b.begin) break;
    if (p < b.end) return b.end - 1;
  }
  return p;
}

int64_t FirstKey(const AttentionChunk& c, int64_t p) {
  return c.window > 0 ? std::max<int64_t>(0, p - c.window + 1) : 0;
}

// Dispatch of the partial tiles at the edges: [rows - 1][columns - 1].
template <typename T>
using ScoreFn = void (*)(const float* const*, const T* const*, int, float*, int64_t);
template <typename T>
using WeighFn = void (*)(const float* const*, const T* const*, int64_t, int, float* const*);

template <typename T>
struct ScoreTiles {
  template <int Q, int K>
  struct Of {
    static constexpr ScoreFn<T> kFn = &ScoreTile<Q, K, T>;
  };
};
template <typename T>
struct WeighTiles {
  template <int Q, int V>
  struct Of {
    static constexpr WeighFn<T> kFn = &WeighTile<Q, V, T>;
  };
};
template <typename T>
constexpr auto kScoreTiles = TileTable<ScoreTiles<T>::template Of, kQueries, kKeys>();
template <typename T>
constexpr auto kWeighTiles = TileTable<WeighTiles<T>::template Of, kQueries, kDimVectors>();

// One group of query vectors, attended together block by block.
struct Group {
  int vectors;
  int64_t ld;  // scores row stride
  const float** q;
  float** out;
  float** p;  // each vector's weights at the current key block
  const float* q_pairs = nullptr;  // the queries packed by PackQueryPairs, where ScoresByQueryPairs
};

// scores[v][j - seg_begin] for the keys [b, b + n) of one block; with `avx512`, two keys a 512-bit
// register (the same bits).
template <typename T>
void ScoreBlock(const Group& g, const T* const* keys, int64_t b, int64_t n, int64_t seg_begin, int hd,
                float* scores, bool avx512, LinePrefetch& ahead) {
  if (avx512 && g.q_pairs != nullptr) {
    ScoreQueryPairs(g.q_pairs, g.vectors, keys, n, hd, scores + (b - seg_begin), g.ld, ahead);
    return;
  }
  if (avx512) {
    ScoreWide(g.q, g.vectors, keys, n, hd, scores + (b - seg_begin), g.ld);
    return;
  }
  for (int r = 0; r < g.vectors; r += kQueries) {
    const int qn = std::min(kQueries, g.vectors - r);
    for (int64_t c = 0; c < n; c += kKeys) {
      const int kn = static_cast<int>(std::min<int64_t>(kKeys, n - c));
      kScoreTiles<T>[qn - 1][kn - 1](g.q + r, keys + c, hd, scores + r * g.ld + (b - seg_begin) + c, g.ld);
    }
  }
}

// out[v] += Σ_j p[v][j] · value[j] over the block's keys, in key order; with `avx512`, the dims of
// whole 16-float vectors on 512-bit registers (the same bits).
template <typename T>
void WeighBlock(const Group& g, const T* const* values, int64_t n, int hd, bool avx512, LinePrefetch& ahead) {
  const int wide = avx512 ? hd / 16 * 16 : 0;
  const int whole = hd / 8 * 8;
  if (wide > 0) WeighWide(g.p, g.vectors, values, n, wide, g.out, ahead);
  for (int r = 0; r < g.vectors; r += kQueries) {
    const int qn = std::min(kQueries, g.vectors - r);
    for (int d = wide; d < whole; d += 8 * kDimVectors) {
      const int vn = std::min(kDimVectors, (whole - d) / 8);
      kWeighTiles<T>[qn - 1][vn - 1](g.p + r, values, n, d, g.out + r);
    }
    if (whole < hd) WeighTail(g.p + r, qn, values, n, whole, hd, g.out + r);
  }
}

// The rows [b, b + n) of K (which = 0) or V (which = 1) as pointers: chunk rows (fp32) at and after
// pos0, cache rows (T) before it. bf16 rows reused by several query tiles are widened into `wide`,
// but where the 512-bit kernels take them as they are (they pack the keys, or read keys and values in
// place for decode-shaped groups).
// Calls fn(pointers) with pointers to float or to T.
template <typename T, typename Fn>
void WithRows(const AttentionChunk& c, int which, int64_t koff, int64_t b, int64_t n, int hd, int vectors,
              AttentionScratch& s, Fn&& fn) {
  s.f32_rows.resize(static_cast<size_t>(n));
  if (b >= c.pos0) {
    const float* base = (which == 0 ? c.k_new : c.v_new) + koff;
    for (int64_t j = 0; j < n; ++j) s.f32_rows[j] = base + (b + j - c.pos0) * c.kv_stride;
    fn(s.f32_rows.data());
    return;
  }
  auto row = [&](int64_t pos) -> const T* {
    return (which == 0 ? c.cache->K<T>(pos) : c.cache->V<T>(pos)) + koff;
  };
  if constexpr (std::is_same_v<T, uint16_t>) {
    const bool kernel_takes_bf16 =
        s.avx512 && (which == 0 ? ScoreWideTakesBf16(vectors, hd) : WeighWideReadsBf16InPlace(vectors));
    if (vectors > kQueries && !kernel_takes_bf16) {
      const int64_t ld = WideRowStride(hd);
      float* wide = ThreadScratch<float, AttentionScratchSlot::kWideRows>(static_cast<size_t>(n * ld));
      s.bf16_rows.resize(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        s.bf16_rows[j] = row(b + j);
        s.f32_rows[j] = wide + j * ld;
      }
      if (s.avx512) {
        WidenWide(s.bf16_rows.data(), n, hd, wide, ld);
      } else {
        for (int64_t j = 0; j < n; ++j) Bf16ToF32Row(s.bf16_rows[j], wide + j * ld, hd);
      }
      fn(s.f32_rows.data());
      return;
    }
    s.bf16_rows.resize(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) s.bf16_rows[j] = row(b + j);
    fn(s.bf16_rows.data());
  } else {
    for (int64_t j = 0; j < n; ++j) s.f32_rows[j] = row(b + j);
    fn(s.f32_rows.data());
  }
}

// What a decode-shaped group's work on a block prefetches, for a bf16 cache (the 512-bit kernels that
// read such rows in place take the prefetches in their steps; an fp32 cache's values are weighed by
// the row-pair kernels, which do not).
// A segment [a, e) is read as its keys' rows, then its values' (after the softmax): read position i of
// that order is key a + i for i < e - a, else value a + i - (e - a). The block at read position x (n
// rows) prefetches the cache rows of the next block, read positions [x + n, x + 2n): each block's work
// fetches one block's rows, so DRAM is read at one steady rate while the keys are scored and while the
// values are weighed. (Values and next keys both fetched while scoring made the scoring wait on its
// prefetches: global layer, one row, from DRAM at 32768 context 7.3 ms, this 5.9-6.1; two and three
// blocks ahead took 2-5 % longer than one.)
template <typename T>
LinePrefetch RowsAhead(const AttentionChunk& c, int64_t koff, int hd, int64_t a, int64_t e, int64_t x, int64_t n,
                       AttentionScratch& s) {
  s.prefetch_rows.clear();
  const int64_t keys = e - a;
  for (int64_t i = x + n; i < std::min(x + 2 * n, 2 * keys); ++i) {
    const int64_t pos = a + (i < keys ? i : i - keys);
    if (pos >= c.pos0) continue;  // the chunk's own rows: fresh, in cache already
    const T* row = i < keys ? c.cache->K<T>(pos) : c.cache->V<T>(pos);
    s.prefetch_rows.push_back(reinterpret_cast<const char*>(row + koff));
  }
  return LinePrefetch(s.prefetch_rows.data(), static_cast<int64_t>(s.prefetch_rows.size()),
                      static_cast<int>(sizeof(T)) * hd);
}

// Visits the keys [begin, end) in blocks that never straddle pos0 (cache rows before, chunk rows after).
template <typename Fn>
void ForKeyBlocks(const AttentionChunk& c, int64_t begin, int64_t end, Fn&& fn) {
  for (int64_t b = begin; b < end;) {
    int64_t e = std::min(end, b + kKeyBlock);
    if (b < c.pos0) e = std::min(e, c.pos0);
    fn(b, e - b);
    b = e;
  }
}

inline float VectorExp(float x) { return _mm256_cvtss_f32(_ZGVdN8v_expf(_mm256_set1_ps(x))); }

// Turns one vector's scores over [lo, hi] (indices into its row) into unnormalized weights
// exp(s - max), zero elsewhere in [0, keys); gives the max and the weights' sum. The sum runs in double
// over 8 lanes (4 + 4) counted from lo, then the tail, so it depends only on the scores. (The bf16
// pairs' weights have their own, attention_dot::SegmentSoftmax.)
void SegmentSoftmax(float* s, int64_t keys, int64_t lo, int64_t hi, float* max, double* sum_out) {
  std::fill(s, s + lo, 0.0f);
  std::fill(s + hi + 1, s + keys, 0.0f);
  float* x = s + lo;
  const int64_t n = hi - lo + 1;
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float mx = -INFINITY;
  for (float l : lanes) mx = std::max(mx, l);
  for (; i < n; ++i) mx = std::max(mx, x[i]);

  const __m256 vm = _mm256_set1_ps(mx);
  __m256d lo_sum = _mm256_setzero_pd(), hi_sum = _mm256_setzero_pd();
  i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = _ZGVdN8v_expf(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    _mm256_storeu_ps(x + i, e);
    lo_sum = _mm256_add_pd(lo_sum, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    hi_sum = _mm256_add_pd(hi_sum, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  double sum_lanes[4];
  _mm256_storeu_pd(sum_lanes, _mm256_add_pd(lo_sum, hi_sum));
  double sum = (sum_lanes[0] + sum_lanes[2]) + (sum_lanes[1] + sum_lanes[3]);
  if (i < n) {  // the tail through the same vector exp, so a score's weight never depends on its lane
    alignas(32) float t[8];
    for (int l = 0; l < 8; ++l) t[l] = i + l < n ? x[i + l] : mx;
    _mm256_store_ps(t, _ZGVdN8v_expf(_mm256_sub_ps(_mm256_load_ps(t), vm)));
    for (int64_t l = 0; i + l < n; ++l) sum += (x[i + l] = t[l]);
  }
  *max = mx;
  *sum_out = sum;
}

// The keys [first, last] that the rows [row_begin, row_end) see together, and the segment of `first`.
struct KeySpan {
  int64_t first, last, first_segment;
};

KeySpan SpanOf(const AttentionChunk& c, int64_t row_begin, int64_t row_end) {
  const int64_t first = FirstKey(c, c.pos0 + row_begin);
  return {first, LastKey(c, c.pos0 + row_end - 1), first / kKeySegment};
}

// Whether a chunk's attention multiplies bf16 pairs (attention_dot.h) rather than fp32 values.
bool Bf16Dot(const AttentionChunk& c, int hd, const AttentionScratch& s) {
  return c.precision == Precision::kBf16 && s.bf16_dot && attention_dot::Bf16DotFits(hd);
}

// Segments [seg_begin, seg_end) of `span` for the query vectors s.q[0 .. vectors), vector v seeing the
// keys visible(v, a, e) = {lo, hi} of a segment's [a, e): per segment, scores of its keys, a softmax
// within the segment per vector, and the weighted values, into the partials (vector v's at row v).
// Keys are read through `c` (its cache before c.pos0, its own rows after). `queries_prepared`: s.q16
// or s.q_pairs already holds the queries as the products take them (a later segment of the same group:
// rounded to bf16 for the bf16 pairs, in pairs for the decode-shaped kernels).
template <typename T, typename Visible>
void AttendVectors(const AttentionChunk& c, int kv_head, int hd, int vectors, const KeySpan& span, int64_t seg_begin,
                   int64_t seg_end, Visible&& visible, SegmentPartials& part, AttentionScratch& s,
                   bool queries_prepared) {
  const bool dot = Bf16Dot(c, hd, s);
  const int64_t koff = int64_t(kv_head) * hd;
  Group g;
  g.vectors = vectors;
  g.ld = kKeySegment;
  s.out.resize(g.vectors);
  s.p.resize(g.vectors);
  g.q = s.q.data();
  g.out = s.out.data();
  g.p = s.p.data();
  s.scores.resize(static_cast<size_t>(g.vectors * g.ld));
  float* scores = s.scores.data();
  if (dot && !queries_prepared) {
    s.q16.resize(static_cast<size_t>(g.vectors) * hd);
    for (int v = 0; v < g.vectors; ++v) F32ToBf16Row(g.q[v], s.q16.data() + int64_t{v} * hd, hd);
  }
  if (!dot && s.avx512 && ScoresByQueryPairs(g.vectors, hd)) {
    if (!queries_prepared) {
      s.q_pairs.resize(static_cast<size_t>(QueryPairFloats(g.vectors, hd)));
      PackQueryPairs(g.q, g.vectors, hd, s.q_pairs.data());
    }
    g.q_pairs = s.q_pairs.data();
  }
  const bool prefetch = g.q_pairs != nullptr && std::is_same_v<T, uint16_t>;

  for (int64_t seg = seg_begin; seg < seg_end; ++seg) {
    const int64_t a = std::max(span.first, (span.first_segment + seg) * kKeySegment);
    const int64_t e = std::min(span.last + 1, (span.first_segment + seg + 1) * kKeySegment);
    // The dot path's rows start at the even position a0 <= a: its value pairs are (2i, 2i + 1).
    const int64_t shift = dot ? a % 2 : 0;
    if (dot) {
      attention_dot::ScoreKeys(c, koff, hd, s.q16.data(), hd, g.vectors, a, e, scores + shift, g.ld);
    } else {
      ForKeyBlocks(c, a, e, [&](int64_t b, int64_t n) {
        LinePrefetch ahead;
        if (prefetch) ahead = RowsAhead<T>(c, koff, hd, a, e, b - a, n, s);
        WithRows<T>(c, 0, koff, b, n, hd, g.vectors, s,
                    [&](auto keys) { ScoreBlock(g, keys, b, n, a, hd, scores, s.avx512, ahead); });
      });
    }
    for (int v = 0; v < g.vectors; ++v) {
      const auto [lo, hi] = visible(v, a, e);
      float* row = scores + v * g.ld + shift;
      const int64_t at = v * part.segments + (seg - part.first);
      if (lo > hi) {  // the vector sees no key here: zero weights, and the combination skips it
        std::fill(row, row + (e - a), 0.0f);
        part.max[at] = -INFINITY;
        part.sum[at] = 0;
      } else {
        auto* softmax = dot ? attention_dot::SegmentSoftmax : SegmentSoftmax;
        softmax(row, e - a, lo - a, hi - a, &part.max[at], &part.sum[at]);
      }
      if (dot) {  // the pairs' keys outside [a, e) weigh 0
        if (shift != 0) row[-1] = 0.0f;
        if ((e - a + shift) % 2 != 0) row[e - a] = 0.0f;
      }
      g.out[v] = part.out.data() + at * hd;
      std::memset(g.out[v], 0, sizeof(float) * hd);
    }
    if (dot) {
      attention_dot::WeighValues(c, koff, hd, scores, g.ld, g.vectors, a, e, g.out);
      continue;
    }
    ForKeyBlocks(c, a, e, [&](int64_t b, int64_t n) {
      for (int v = 0; v < g.vectors; ++v) g.p[v] = scores + v * g.ld + (b - a);
      LinePrefetch ahead;
      if (prefetch) ahead = RowsAhead<T>(c, koff, hd, a, e, (e - a) + (b - a), n, s);
      WithRows<T>(c, 1, koff, b, n, hd, g.vectors, s,
                  [&](auto values) { WeighBlock(g, values, n, hd, s.avx512, ahead); });
    });
  }
}

// Segments [seg_begin, seg_end) of one group: the rows [row_begin, row_end) of heads [h0, h0 + heads),
// each seeing its own keys (causal, window, image blocks).
template <typename T>
void AttendGroup(const AttentionChunk& c, int h0, int heads, int kv_head, int hd, int64_t row_begin,
                 int64_t row_end, int64_t seg_begin, int64_t seg_end, SegmentPartials& part, AttentionScratch& s,
                 bool queries_prepared = false) {
  const int vectors = static_cast<int>((row_end - row_begin) * heads);
  s.q.resize(vectors);
  for (int v = 0; v < vectors; ++v) s.q[v] = c.q + (row_begin + v / heads) * c.q_stride + (h0 + v % heads) * hd;
  auto visible = [&](int v, int64_t a, int64_t e) {
    const int64_t p = c.pos0 + row_begin + v / heads;
    return std::pair<int64_t, int64_t>{std::max(a, FirstKey(c, p)), std::min(e - 1, LastKey(c, p))};
  };
  AttendVectors<T>(c, kv_head, hd, vectors, SpanOf(c, row_begin, row_end), seg_begin, seg_end, visible, part, s,
                   queries_prepared);
}

// Folds a segment's partial (at `at` in part) into one vector's running result: `out` holds
// Σ exp(s - max)·v and *sum Σ exp(s - max) over the segments folded so far (max -inf: none yet); both
// sides are rescaled to the larger maximum (exactly 1 for the side that holds it). Every path folds a
// vector's segments in segment order through here, so its bits do not depend on how they were split.
void Fold(const SegmentPartials& part, int64_t at, float* out, float* max, double* sum) {
  const int hd = part.head_dim;
  const float m = part.max[at];
  if (m == -INFINITY) return;  // the vector sees no key in this segment
  const float* o = part.out.data() + at * hd;
  if (*max == -INFINITY) {
    std::memcpy(out, o, sizeof(float) * hd);
    *max = m;
    *sum = part.sum[at];
    return;
  }
  const float top = std::max(*max, m);
  const float keep = *max == top ? 1.0f : VectorExp(*max - top);
  const float scale = m == top ? 1.0f : VectorExp(m - top);
  const __m256 kv = _mm256_set1_ps(keep), sv = _mm256_set1_ps(scale);
  int d = 0;
  for (; d + 8 <= hd; d += 8) {
    _mm256_storeu_ps(out + d, _mm256_fmadd_ps(sv, _mm256_loadu_ps(o + d), _mm256_mul_ps(kv, _mm256_loadu_ps(out + d))));
  }
  for (; d < hd; ++d) out[d] = std::fma(scale, o[d], keep * out[d]);
  *sum = double{keep} * *sum + double{scale} * part.sum[at];
  *max = top;
}

void Normalize(float* out, double sum, int hd) {
  const float inv = static_cast<float>(1.0 / sum);
  const __m256 iv = _mm256_set1_ps(inv);
  int d = 0;
  for (; d + 8 <= hd; d += 8) _mm256_storeu_ps(out + d, _mm256_mul_ps(_mm256_loadu_ps(out + d), iv));
  for (; d < hd; ++d) out[d] *= inv;
}

// Where vector v (row-major over rows from row_begin and heads from h0) writes its result.
float* OutputOf(const AttentionChunk& c, int h0, int heads, int hd, int64_t row_begin, int64_t v) {
  return c.out + (row_begin + v / heads) * c.out_stride + (h0 + v % heads) * hd;
}

// Groups of up to kMaxGroupVectors vectors, one segment at a time, each folded into the outputs as
// soon as it is done: what a group keeps does not grow with the context.
template <typename T>
void AttendRows(const AttentionChunk& c, int h0, int h1, int kv_head, int hd, int64_t row_begin, int64_t row_end,
                AttentionScratch& s) {
  const int heads = h1 - h0;
  const int64_t rows_per_group = std::max<int64_t>(1, kMaxGroupVectors / heads);
  for (int64_t r = row_begin; r < row_end; r += rows_per_group) {
    const int64_t r_end = std::min(row_end, r + rows_per_group);
    const int64_t vectors = (r_end - r) * heads;
    s.partials.Resize(vectors, 1, hd);
    s.running_max.assign(static_cast<size_t>(vectors), -INFINITY);
    s.running_sum.assign(static_cast<size_t>(vectors), 0.0);
    for (int64_t seg = 0, segments = SegmentCount(c, r, r_end); seg < segments; ++seg) {
      s.partials.first = seg;
      AttendGroup<T>(c, h0, heads, kv_head, hd, r, r_end, seg, seg + 1, s.partials, s, /*queries_prepared=*/seg > 0);
      for (int64_t v = 0; v < vectors; ++v) {
        Fold(s.partials, v, OutputOf(c, h0, heads, hd, r, v), &s.running_max[v], &s.running_sum[v]);
      }
    }
    for (int64_t v = 0; v < vectors; ++v) Normalize(OutputOf(c, h0, heads, hd, r, v), s.running_sum[v], hd);
  }
}

}  // namespace

void SegmentPartials::Resize(int64_t vector_count, int64_t segment_count, int dim) {
  vectors = vector_count;
  segments = segment_count;
  first = 0;
  head_dim = dim;
  out.resize(static_cast<size_t>(vectors * segments * dim));
  max.resize(static_cast<size_t>(vectors * segments));
  sum.resize(static_cast<size_t>(vectors * segments));
}

int64_t SegmentCount(const AttentionChunk& c, int64_t row_begin, int64_t row_end) {
  const KeySpan span = SpanOf(c, row_begin, row_end);
  return span.last / kKeySegment - span.first_segment + 1;
}

namespace {

// fn(T{}) with T the cache's element type: float for an fp32 cache, uint16_t (bf16 bits) otherwise.
template <typename Fn>
void WithCacheType(Precision precision, Fn&& fn) {
  if (precision == Precision::kFp32) {
    fn(float{});
  } else {
    fn(uint16_t{});
  }
}

}  // namespace

void AttendHeads(const AttentionChunk& c, int head_begin, int head_end, int kv_head, int head_dim,
                 int64_t row_begin, int64_t row_end, AttentionScratch& scratch) {
  WithCacheType(c.precision, [&](auto t) {
    AttendRows<decltype(t)>(c, head_begin, head_end, kv_head, head_dim, row_begin, row_end, scratch);
  });
}

void AttendSegments(const AttentionChunk& c, int head_begin, int head_end, int kv_head, int head_dim,
                    int64_t row_begin, int64_t row_end, int64_t seg_begin, int64_t seg_end,
                    SegmentPartials& partials, AttentionScratch& scratch) {
  WithCacheType(c.precision, [&](auto t) {
    AttendGroup<decltype(t)>(c, head_begin, head_end - head_begin, kv_head, head_dim, row_begin, row_end, seg_begin,
                             seg_end, partials, scratch);
  });
}

void AttendSharedSegments(absl::Span<const AttentionChunk* const> chunks, int head_begin, int head_end, int kv_head,
                          int head_dim, int64_t seg_begin, int64_t seg_end, SegmentPartials& partials,
                          AttentionScratch& scratch) {
  scratch.q.clear();
  for (const AttentionChunk* c : chunks) {
    for (int64_t r = 0; r < c->n; ++r) {
      for (int h = head_begin; h < head_end; ++h) scratch.q.push_back(c->q + r * c->q_stride + int64_t{h} * head_dim);
    }
  }
  const int vectors = static_cast<int>(scratch.q.size());
  const KeySpan span{0, seg_end * kKeySegment - 1, 0};
  auto every_key = [](int, int64_t a, int64_t e) { return std::pair<int64_t, int64_t>{a, e - 1}; };
  const AttentionChunk& c = *chunks[0];  // the keys' rows are the same memory in every chunk's cache
  WithCacheType(c.precision, [&](auto t) {
    AttendVectors<decltype(t)>(c, kv_head, head_dim, vectors, span, seg_begin, seg_end, every_key, partials, scratch,
                               /*queries_prepared=*/false);
  });
}

void CombineSegments(const AttentionChunk& c, int head_begin, int head_end, int head_dim, int64_t row_begin,
                     int64_t row_end, const SegmentPartials& partials, const SegmentPartials* shared,
                     int64_t shared_offset) {
  const int heads = head_end - head_begin;
  for (int64_t v = 0; v < (row_end - row_begin) * heads; ++v) {
    float* out = OutputOf(c, head_begin, heads, head_dim, row_begin, v);
    float max = -INFINITY;
    double sum = 0;
    if (shared != nullptr) {
      const int64_t sv = shared_offset + v;
      for (int64_t seg = 0; seg < shared->segments; ++seg) Fold(*shared, sv * shared->segments + seg, out, &max, &sum);
    }
    for (int64_t seg = 0; seg < partials.segments; ++seg) Fold(partials, v * partials.segments + seg, out, &max, &sum);
    Normalize(out, sum, head_dim);
  }
}

bool AttentionAvx512Default() {
  static const bool on = CpuSupportsAvx512F() && ActiveMatmulIsa() != MatmulIsa::kAvx2;
  return on;
}

bool AttentionBf16DotDefault() {
  static const bool on = ActiveMatmulIsa() == MatmulIsa::kAvx512Bf16;
  return on;
}

void StoreChunk(const AttentionChunk& c) {
  const int64_t width = c.cache->row_width();
  c.cache->Reserve(c.pos0 + c.n);
  const int64_t first = c.window > 0 ? std::max<int64_t>(0, c.n - c.window) : 0;
  for (int64_t i = first; i < c.n; ++i) {
    const float* k = c.k_new + i * c.kv_stride;
    const float* v = c.v_new + i * c.kv_stride;
    if (c.precision == Precision::kFp32) {
      std::memcpy(c.cache->K<float>(c.pos0 + i), k, sizeof(float) * width);
      std::memcpy(c.cache->V<float>(c.pos0 + i), v, sizeof(float) * width);
    } else {
      F32ToBf16Row(k, c.cache->K<uint16_t>(c.pos0 + i), width);
      F32ToBf16Row(v, c.cache->V<uint16_t>(c.pos0 + i), width);
    }
  }
}

}  // namespace layerpipe
