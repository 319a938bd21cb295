// Register-tiled building blocks of CPU attention (engine/cpu/attention.cc). Each tile computes a
// block of results that the straightforward loops would compute one at a time, in the same order per
// result, so a score or an output value never depends on which tile, block or thread produced it:
//  - a score is an 8-lane fused multiply-add over the head dims, then a fixed horizontal sum
//    (then a scalar fused tail when head_dim is not a multiple of 8);
//  - an output value is a chain of fused multiply-adds over the keys in position order.
// Rows are fp32 or bf16 (uint16_t bits, widened exactly), read through one pointer per row so a ring
// that wraps, cache pages and the chunk's own rows all look alike.
#ifndef LAYERPIPE_ENGINE_CPU_ATTENTION_TILES_H_
#define LAYERPIPE_ENGINE_CPU_ATTENTION_TILES_H_

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "engine/cpu/avx2_sum.h"
#include "engine/model/bf16.h"

namespace layerpipe::attention_tiles {

// Query vectors per tile, keys per score tile, 8-float vectors of dims per output tile: 12 accumulators
// plus the loads fit the 16 ymm registers.
constexpr int kQueries = 4;
constexpr int kKeys = 3;
constexpr int kDimVectors = 3;

inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const uint16_t* p) { return Bf16x8ToF32(p); }
inline float Widen(float v) { return v; }
inline float Widen(uint16_t v) { return Bf16ToF32(v); }

// A score from its lanes' horizontal sum s (dims [0, d)): the dims past the last whole vector, one
// scalar fused chain. Every score path ends here, so their tails agree.
template <typename T>
inline float ScoreTail(float s, const float* q, const T* k, int d, int hd) {
  for (; d < hd; ++d) s = std::fma(q[d], Widen(k[d]), s);
  return s;
}

// scores[r * ld + c] = q[r] · k[c] over hd dims, for Q query vectors and K keys.
template <int Q, int K, typename T>
inline void ScoreTile(const float* const* q, const T* const* k, int hd, float* scores, int64_t ld) {
  __m256 acc[Q][K];
#pragma GCC unroll 4
  for (int r = 0; r < Q; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < K; ++c) acc[r][c] = _mm256_setzero_ps();
  int d = 0;
  for (; d + 8 <= hd; d += 8) {
    __m256 kv[K];
#pragma GCC unroll 4
    for (int c = 0; c < K; ++c) kv[c] = Load8(k[c] + d);
#pragma GCC unroll 4
    for (int r = 0; r < Q; ++r) {
      const __m256 qv = _mm256_loadu_ps(q[r] + d);
#pragma GCC unroll 4
      for (int c = 0; c < K; ++c) acc[r][c] = _mm256_fmadd_ps(qv, kv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < Q; ++r) {
    for (int c = 0; c < K; ++c) {
      scores[r * ld + c] = ScoreTail(HorizontalSum(acc[r][c]), q[r], k[c], d, hd);
    }
  }
}

// out[r][d0 .. d0 + 8·V) += Σ_j p[r][j] · v[j][d0 ..] for j in [0, keys), in j order.
template <int Q, int V, typename T>
inline void WeighTile(const float* const* p, const T* const* v, int64_t keys, int d0, float* const* out) {
  __m256 acc[Q][V];
#pragma GCC unroll 4
  for (int r = 0; r < Q; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < V; ++c) acc[r][c] = _mm256_loadu_ps(out[r] + d0 + 8 * c);
  for (int64_t j = 0; j < keys; ++j) {
    __m256 vv[V];
#pragma GCC unroll 4
    for (int c = 0; c < V; ++c) vv[c] = Load8(v[j] + d0 + 8 * c);
#pragma GCC unroll 4
    for (int r = 0; r < Q; ++r) {
      const __m256 pr = _mm256_broadcast_ss(p[r] + j);
#pragma GCC unroll 4
      for (int c = 0; c < V; ++c) acc[r][c] = _mm256_fmadd_ps(pr, vv[c], acc[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < Q; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < V; ++c) _mm256_storeu_ps(out[r] + d0 + 8 * c, acc[r][c]);
}

// The dims past the last whole vector, one scalar fused multiply-add chain each.
template <typename T>
inline void WeighTail(const float* const* p, int queries, const T* const* v, int64_t keys, int d0, int hd,
                      float* const* out) {
  for (int r = 0; r < queries; ++r) {
    for (int d = d0; d < hd; ++d) {
      float acc = out[r][d];
      for (int64_t j = 0; j < keys; ++j) acc = std::fma(p[r][j], Widen(v[j][d]), acc);
      out[r][d] = acc;
    }
  }
}

// Cache rows' lines handed to the prefetcher (into L2) one or two at a time while a kernel computes,
// for rows that a decode-shaped group reads in place a little later (attention.cc's RowsAhead). Rows
// 1-2 KiB long read a few at a time are short streams that the hardware prefetchers pick up late;
// from DRAM the products waited on them.
class LinePrefetch {
 public:
  LinePrefetch() = default;
  LinePrefetch(const char* const* rows, int64_t count, int row_bytes)
      : next_row_(rows), end_(rows + count), row_lines_((row_bytes + 63) / 64) {}
  void Next() {
    if (lines_left_ == 0) {
      if (next_row_ == end_) return;
      line_ = *next_row_++;
      lines_left_ = row_lines_;
    }
    _mm_prefetch(line_, _MM_HINT_T2);
    line_ += 64;
    --lines_left_;
  }

 private:
  const char* const* next_row_ = nullptr;
  const char* const* end_ = nullptr;
  int row_lines_ = 0;
  const char* line_ = nullptr;
  int lines_left_ = 0;
};

// scores[r * ld + c] = q[r] · k[c] for r < queries, c < keys: ScoreTile's arithmetic on 512-bit
// registers (attention_avx512f.cc); with more query vectors than a decode step has, the keys are first
// packed (and bf16 ones widened) once for all the queries. Only where the CPU has AVX-512F.
void ScoreWide(const float* const* q, int queries, const float* const* k, int64_t keys, int hd, float* scores,
               int64_t ld);
void ScoreWide(const float* const* q, int queries, const uint16_t* const* k, int64_t keys, int hd, float* scores,
               int64_t ld);

// The same arithmetic for decode-shaped groups (ScoresByQueryPairs): the queries packed in pairs once
// for all the key blocks (PackQueryPairs, into QueryPairFloats(queries, hd) floats 64-byte aligned),
// the keys read in place, bf16 ones widened in registers; `ahead`'s lines are prefetched meanwhile.
// Only where the CPU has AVX-512F.
bool ScoresByQueryPairs(int queries, int hd);
// Whether ScoreWide or ScoreQueryPairs takes bf16 keys as they are for `queries` vectors (it packs
// them, or reads them in place), so that the caller need not widen them.
bool ScoreWideTakesBf16(int queries, int hd);
int64_t QueryPairFloats(int queries, int hd);
void PackQueryPairs(const float* const* q, int queries, int hd, float* out);
void ScoreQueryPairs(const float* pairs, int queries, const float* const* k, int64_t keys, int hd, float* scores,
                     int64_t ld, LinePrefetch& ahead);
void ScoreQueryPairs(const float* pairs, int queries, const uint16_t* const* k, int64_t keys, int hd,
                     float* scores, int64_t ld, LinePrefetch& ahead);

// out[r][0 .. dims) += Σ_j p[r][j] · v[j][..] for r < queries, dims a multiple of 16: WeighTile's
// arithmetic on 512-bit registers (attention_avx512f.cc); bf16 values are read in place and widened
// in registers where WeighWideReadsBf16InPlace (as many query vectors as a decode step has), else the
// caller widens them first; `ahead`'s lines are prefetched meanwhile (by the in-place kernels). Only
// where the CPU has AVX-512F.
bool WeighWideReadsBf16InPlace(int queries);
void WeighWide(const float* const* p, int queries, const float* const* v, int64_t keys, int dims,
               float* const* out, LinePrefetch& ahead);
void WeighWide(const float* const* p, int queries, const uint16_t* const* v, int64_t keys, int dims,
               float* const* out, LinePrefetch& ahead);

// out[j * ld + d] = rows[j][d] widened to fp32 for j < n, d < hd: 16 values a step on 512-bit
// registers (attention_avx512f.cc), the exact conversion. Only where the CPU has AVX-512F.
void WidenWide(const uint16_t* const* rows, int64_t n, int hd, float* out, int64_t ld);

}  // namespace layerpipe::attention_tiles

#endif  // LAYERPIPE_ENGINE_CPU_ATTENTION_TILES_H_
