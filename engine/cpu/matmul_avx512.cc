// AVX-512 BF16 matmul kernel (vdpbf16ps): x and W both bf16, fp32 accumulation. Every (row, column)
// runs the same per-lane arithmetic (see kAvx512KStep) whatever the row count, so m changes speed,
// never bits:
//  - streaming (decode): weights are read in place, once, straight from memory;
//  - packed (prefill): a block of weight columns is copied into a tile-interleaved buffer that every
//    row tile reuses, rows are taken in blocks and k in ranges, with partial sums parked per lane
//    between k ranges; where k is not a multiple of 32 the packing's zeros feed vdpbf16ps exactly
//    what the streaming path's masked loads do;
//  - weights stored tiled at load (engine/model/tiled_rows.h) are already in the packed order: both
//    paths read them in place, a row group (one tile's columns) as one stream.
//
// Everything that executes AVX-512 instructions carries kTarget; the front end calls in here only
// after checking the CPU, and nothing in this file runs otherwise.
#include <immintrin.h>

#include <algorithm>

#include "engine/cpu/matmul_kernels.h"
#include "engine/cpu/tile_table.h"
#include "engine/model/tiled_rows.h"

#define LP_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace layerpipe::matmul_internal {
namespace {

// Few rows (decode): 4 x 4 tiles, 16 accumulators + 4 weight vectors + 1 x vector of the 32 zmm
// registers; weights are read in place, the whole k at once (they stream from DRAM exactly once).
constexpr int kStreamRows = 4;
constexpr int kStreamCols = 4;
constexpr int64_t kLanes = 16;
constexpr int64_t kStreamMaxRows = 8;
// Many rows (prefill): 8 x 3 tiles, 24 accumulators + 3 weight vectors + 1 x vector. The x tile (8 rows
// of a k block) stays in L1 while the packed weight tiles stream past from L2: 3 L2 vectors feed 24
// vdpbf16ps, where a 4 x 4 tile's 4 fed 16 -- twice the L2 traffic per product, which capped the 4 x 4
// tile at ~60 % of peak on a core that issues two vdpbf16ps per cycle (Zen 5).
constexpr int kPackRows = 8;
constexpr int kPackCols = 3;
static_assert(kPackCols == kTileRows && kAvx512KStep == kTileDepth, "tiled weights are read as packed tiles");
// kBlockCols weight columns are packed (tile-interleaved, up to kPackK values of k: L2) once per column
// block and every row tile reuses them. Packing makes each tile's weights one sequential stream: read in
// place, the rows of a tile lie k * 2 bytes apart, which for k = 4096 puts them in one L1 set.
constexpr int64_t kBlockCols = 48;
// k is taken kBlockK values at a time, so the x tile (8 rows x kBlockK bf16, 16 KiB) stays in L1 while
// the weight tiles go past; partial sums are parked per lane between k blocks.
constexpr int64_t kBlockK = 1024;
// Rows are taken this many at a time, so a k block of their x and their parked sums stay in L2.
constexpr int64_t kBlockRows = 64;
// Most k values packed at once: 48 columns x 4096 values of bf16 are 384 KiB (of a 1 MiB L2).
constexpr int64_t kPackK = 4096;
// Bytes of x per pass over all column blocks (PackedColumns' caller): every column block reads them
// again, from L3 while they fit (both threads of a 2-core VM slowed ~25 % on down_proj's 512 x 15360
// when they did not).
constexpr int64_t kSuperBytes = int64_t{4} << 20;
// How far ahead (in weight elements, 512 bytes) each in-place weight row is prefetched; the value
// measured best for the AVX2 kernel on Zen 4.
constexpr int64_t kPrefetchAhead = 256;
// The same for a row group of tiled weights (three columns interleaved: 1 KiB ahead).
constexpr int64_t kTiledPrefetchAhead = 512;

// Fixed tree: 16 -> 8 (lane l + lane l+8) -> 4 -> 2 -> 1, always in this order. Goes through
// memory for the 512 -> 256 split: it runs once per output, and GCC 12's 512-bit cast intrinsics
// raise spurious -Wmaybe-uninitialized warnings.
LP_AVX512_BF16 inline float HorizontalSum(__m512 v) {
  alignas(64) float lanes[kLanes];
  _mm512_store_ps(lanes, v);
  const __m256 h = _mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8));
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// HorizontalSum of 16 vectors at once, by the same tree: each stage adds the same lane pairs for all
// vectors, after shuffles that put one vector's pairs next to another's. Result lane 4q + g holds the
// sum of v[q + 4g]; StoreSums' permutation maps it back. Floating-point addition is commutative, so only the
// pairing matters, and it is HorizontalSum's.
LP_AVX512_BF16 inline __m512 HorizontalSums16(const __m512 (&v)[16]) {
  __m512 h[8];  // per 128-bit quarter: [v2i lanes 0-3 + 8-11, 4-7 + 12-15, the same for v2i+1]
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    h[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  __m512 s[4];  // quarter q: lanes l + l+4 of h (4 vectors' 4-lane sums)
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    s[i] = _mm512_add_ps(_mm512_shuffle_f32x4(h[2 * i], h[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(h[2 * i], h[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  __m512 t[2];  // within each quarter: [s0 + s2, s1 + s3] of two vectors
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    t[i] = _mm512_add_ps(_mm512_shuffle_ps(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// y[r * ldy + c] = HorizontalSum(acc[r][c]). Tiles of 8 or more results reduce 16 at a time
// (HorizontalSums16, ~3 instructions per result against ~10); both give the same bits.
template <int R, int C>
LP_AVX512_BF16 inline void StoreSums(const __m512 (&acc)[R][C], float* y, int64_t ldy) {
  if constexpr (R * C < 8) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) y[r * ldy + c] = HorizontalSum(acc[r][c]);
    }
  } else {
    constexpr int kGroups = (R * C + 15) / 16;
    alignas(64) float sums[kGroups * 16];
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
#pragma GCC unroll 2
    for (int g = 0; g < kGroups; ++g) {
      __m512 v[16];
#pragma GCC unroll 16
      for (int o = 0; o < 16; ++o) {
        const int idx = g * 16 + o;
        v[o] = idx < R * C ? acc[idx / C][idx % C] : _mm512_setzero_ps();
      }
      _mm512_store_ps(sums + g * 16, _mm512_permutexvar_ps(order, HorizontalSums16(v)));
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) y[r * ldy + c] = sums[r * C + c];
    }
  }
}

// Weight sources for Accumulate: Load(c, q) is w[column c][q, q + 32) of the tile.
// In place: rows of the weight matrix, prefetched ahead (the DRAM stream of decode).
struct InPlaceWeights {
  const uint16_t* w;
  int64_t ld;
  bool prefetch;
  LP_AVX512_BF16 __m512i Load(int c, int64_t q) const { return _mm512_loadu_si512(w + c * ld + q); }
  LP_AVX512_BF16 __m512i LoadPartial(int c, int64_t q, __mmask32 mask) const {
    return _mm512_maskz_loadu_epi16(mask, w + c * ld + q);
  }
  void Prefetch(int c, int64_t q) const {
    if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(w + c * ld + q + kPrefetchAhead), _MM_HINT_T0);
  }
};
// Packed (PackColumns: `width` = kPackCols, zeros past k) or stored tiled (engine/model/tiled_rows.h:
// `width` = the row group's size): for each step of 32 values of k, the tile's columns' vectors one
// after another; a sequential stream the hardware prefetcher follows on its own.
struct PackedWeights {
  const uint16_t* tile;
  int64_t q_begin;  // the first k value at `tile`
  int64_t width;    // vectors per step of k
  LP_AVX512_BF16 __m512i Load(int c, int64_t q) const {
    return _mm512_loadu_si512(tile + (q - q_begin) * width + c * kAvx512KStep);  // q is a multiple of 32
  }
  LP_AVX512_BF16 __m512i LoadPartial(int c, int64_t q, __mmask32) const { return Load(c, q); }
  void Prefetch(int c, int64_t q) const {
    if (ahead > 0) {
      _mm_prefetch(reinterpret_cast<const char*>(tile + (q - q_begin) * width + c * kAvx512KStep + ahead), _MM_HINT_T0);
    }
  }
  int64_t ahead = 0;  // values ahead of each load to prefetch (0: none, for the packed buffer in L2)
};

// Decode of one row with weight rows up to this long reads them one column at a time, without software
// prefetch: a thread's weights are then one sequential stream, which the hardware prefetcher keeps
// ~20 % closer to the DRAM bandwidth than four interleaved prefetched rows (Zen 4, q/gate/up shapes
// and the head). Longer rows (down_proj, k = 15360) measured faster with the four prefetched rows.
constexpr int64_t kSingleRowStreamMaxK = 8192;
inline bool SingleRowStream(const Avx512Bf16Problem& p) { return p.m == 1 && p.k <= kSingleRowStreamMaxK; }

// acc[r][c] += over q in [q_begin, q_end): x[r][q] * w[c][q], in steps of 32 (the last one may be
// partial: weights beyond q_end are zero; x is zero-padded there by the front end).
template <int R, int C, typename W>
LP_AVX512_BF16 void Accumulate(const uint16_t* x, int64_t ldx, const W& w, int64_t q_begin, int64_t q_end,
                               __m512 (&acc)[R][C]) {
  int64_t q = q_begin;
  for (; q + kAvx512KStep <= q_end; q += kAvx512KStep) {
    __m512i wv[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      w.Prefetch(c, q);
      wv[c] = w.Load(c, q);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512i xv = _mm512_loadu_si512(x + r * ldx + q);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], (__m512bh)xv, (__m512bh)wv[c]);
    }
  }
  if (q < q_end) {
    const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << (q_end - q)) - 1);
    __m512i wv[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) wv[c] = w.LoadPartial(c, q, mask);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512i xv = _mm512_loadu_si512(x + r * ldx + q);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], (__m512bh)xv, (__m512bh)wv[c]);
    }
  }
}

// One R x C tile (rows i.., columns j..) over k range [q0, q1). Partial sums live in `park` (16
// floats per (row, column), row stride park_ld vectors) between k blocks; the block that ends k
// writes y.
template <int R, int C, typename W>
LP_AVX512_BF16 void Tile(const Avx512Bf16Problem& p, int64_t i, int64_t j, const W& w, int64_t q0, int64_t q1,
                         bool first, bool last, float* park, int64_t park_ld) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      acc[r][c] = first ? _mm512_setzero_ps() : _mm512_load_ps(park + (r * park_ld + c) * kLanes);
    }
  }
  Accumulate<R, C>(p.x + i * p.ldx, p.ldx, w, q0, q1, acc);
  if (last) {
    StoreSums<R, C>(acc, p.y + i * p.n + j, p.n);
    return;
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) _mm512_store_ps(park + (r * park_ld + c) * kLanes, acc[r][c]);
  }
}

template <int R, int C>
LP_AVX512_BF16 void StreamTile(const Avx512Bf16Problem& p, int64_t i, int64_t j) {
  Tile<R, C>(p, i, j, InPlaceWeights{p.w + j * p.k, p.k, !SingleRowStream(p)}, 0, p.k, true, true, nullptr, 0);
}

// The row group of tiled weights that starts at column j.
inline PackedWeights TiledGroup(const Avx512Bf16Problem& p, int64_t j) {
  return PackedWeights{p.w + j * p.k, 0, TileGroupRows(j, p.n)};
}
// The same for the streaming path: one row (decode) reads one group at a time and leaves it to the
// hardware prefetcher, as SingleRowStream does; more rows read two groups at once (TiledGroups),
// each prefetched kTiledPrefetchAhead values ahead -- 10-20 % faster than one group at 2-8 rows.
inline PackedWeights TiledStream(const Avx512Bf16Problem& p, int64_t j) {
  PackedWeights w = TiledGroup(p, j);
  w.ahead = p.m == 1 ? 0 : kTiledPrefetchAhead;
  return w;
}
inline int64_t TiledStreamGroups(const Avx512Bf16Problem& p) { return p.m == 1 ? 1 : 2; }

// Two row groups of tiled weights side by side (columns 0-2 in the first, 3-5 in the second): two
// streams from memory at once.
struct TiledGroups {
  PackedWeights a, b;
  LP_AVX512_BF16 __m512i Load(int c, int64_t q) const {
    return c < kTileRows ? a.Load(c, q) : b.Load(c - kTileRows, q);
  }
  LP_AVX512_BF16 __m512i LoadPartial(int c, int64_t q, __mmask32) const { return Load(c, q); }
  void Prefetch(int c, int64_t q) const { c < kTileRows ? a.Prefetch(c, q) : b.Prefetch(c - kTileRows, q); }
};

// Columns j.. of tiled weights (j starts a row group), read in place, a group as one stream.
template <int R, int C>
LP_AVX512_BF16 void TiledStreamTile(const Avx512Bf16Problem& p, int64_t i, int64_t j) {
  if constexpr (C <= kTileRows) {
    Tile<R, C>(p, i, j, TiledStream(p, j), 0, p.k, true, true, nullptr, 0);
  } else {
    Tile<R, C>(p, i, j, TiledGroups{TiledStream(p, j), TiledStream(p, j + kTileRows)}, 0, p.k, true, true, nullptr, 0);
  }
}

template <int R, int C>
LP_AVX512_BF16 void PackedTile(const Avx512Bf16Problem& p, int64_t i, int64_t j, const PackedWeights& w, int64_t q0,
                               int64_t q1, float* park, int64_t park_ld) {
  const int64_t kp = RoundUp(p.k, kAvx512KStep);
  Tile<R, C>(p, i, j, w, q0, q1, q0 == 0, q1 >= kp, park, park_ld);
}

using StreamFn = void (*)(const Avx512Bf16Problem&, int64_t, int64_t);
using PackedFn = void (*)(const Avx512Bf16Problem&, int64_t, int64_t, const PackedWeights&, int64_t, int64_t,
                          float*, int64_t);

template <int R, int C>
struct TiledStreamEntry {
  static constexpr StreamFn kFn = &TiledStreamTile<R, C>;
};
template <int R, int C>
struct StreamEntry {
  static constexpr StreamFn kFn = &StreamTile<R, C>;
};
template <int R, int C>
struct PackedEntry {
  static constexpr PackedFn kFn = &PackedTile<R, C>;
};
constexpr auto kStreamTiles = TileTable<StreamEntry, kStreamRows, kStreamCols>();
constexpr auto kTiledStreamTiles = TileTable<TiledStreamEntry, kStreamRows, 2 * kPackCols>();
constexpr auto kPackedTiles = TileTable<PackedEntry, kPackRows, kPackCols>();

// Columns [j, j + cols) over k values [q_begin, q_end) (multiples of 32, or q_end the padded k) of w
// into `out` as tiles of kPackCols columns, tile t at out + t * (q_end - q_begin), in PackedWeights'
// layout; values past k and missing columns of a last narrow tile are zero.
LP_AVX512_BF16 void PackColumns(const Avx512Bf16Problem& p, int64_t j, int64_t cols, int64_t q_begin, int64_t q_end,
                                uint16_t* out) {
  for (int64_t t = 0; t < cols; t += kPackCols) {
    uint16_t* tile = out + t * (q_end - q_begin);
    for (int c = 0; c < kPackCols; ++c) {
      const bool present = t + c < cols;
      const uint16_t* src = present ? p.w + (j + t + c) * p.k : p.w;
      for (int64_t q = q_begin; q < q_end; q += kAvx512KStep) {
        const int64_t len = present ? std::clamp<int64_t>(p.k - q, 0, kAvx512KStep) : 0;
        const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << len) - 1);
        _mm512_store_si512(tile + (q - q_begin) * kPackCols + c * kAvx512KStep,
                           _mm512_maskz_loadu_epi16(mask, src + q));
      }
    }
  }
}

void StreamColumns(const Avx512Bf16Problem& p, int64_t j_begin, int64_t j_end) {
  const int64_t step = p.w_tiled ? TiledStreamGroups(p) * kTileRows : SingleRowStream(p) ? 1 : kStreamCols;
  for (int64_t j = j_begin; j < j_end; j += step) {
    const int64_t cols = std::min<int64_t>(step, j_end - j);
    for (int64_t i = 0; i < p.m; i += kStreamRows) {
      const int64_t rows = std::min<int64_t>(kStreamRows, p.m - i);
      (p.w_tiled ? kTiledStreamTiles[rows - 1][cols - 1] : kStreamTiles[rows - 1][cols - 1])(p, i, j);
    }
  }
}

// Prefetches `rows` byte ranges of `bytes` each, `stride` apart, into L2 a piece at a time, spread
// over the steps of the work that precedes their use: the next chunk's weights arrive from DRAM while
// this chunk computes, instead of stalling its packing.
class SpreadPrefetch {
 public:
  SpreadPrefetch(const void* begin, int64_t rows, int64_t stride, int64_t bytes, int64_t steps)
      : row_(static_cast<const char*>(begin)), rows_left_(rows), stride_(stride), bytes_(bytes),
        lines_per_step_((rows * ((bytes + 63) / 64) + steps - 1) / std::max<int64_t>(steps, 1)) {}
  void Step() {
    for (int64_t n = 0; n < lines_per_step_ && rows_left_ > 0; ++n) {
      _mm_prefetch(row_ + offset_, _MM_HINT_T1);
      offset_ += 64;
      if (offset_ >= bytes_) {
        offset_ = 0;
        row_ += stride_;
        --rows_left_;
      }
    }
  }

 private:
  const char* row_;
  int64_t rows_left_;
  int64_t stride_;
  int64_t bytes_;
  int64_t offset_ = 0;
  int64_t lines_per_step_;
};

// Rows [i_begin, i_end) of columns [j_begin, j_end). A column block is packed kc values of k at a
// time (kc <= kPackK), so the packed block stays in L2 however long k is (down_proj: 15360). Tiled
// weights are already in the packed order: their block is read in place, kc values of k at a time too.
void PackedColumns(const Avx512Bf16Problem& p, int64_t i_begin, int64_t i_end, int64_t j_begin, int64_t j_end) {
  const int64_t kp = RoundUp(p.k, kAvx512KStep);
  const int64_t m = i_end - i_begin;
  const int64_t k_chunks = (kp + kPackK - 1) / kPackK;
  const int64_t kc = RoundUp((kp + k_chunks - 1) / k_chunks, kAvx512KStep);
  uint16_t* packed = p.w_tiled ? nullptr : ThreadScratch<uint16_t, Slot::kPackedWeights>(kBlockCols * kc);
  // Partial sums live from one k block to the next: within a row block when one chunk holds all of k,
  // else across chunks, for every row.
  const int64_t park_rows = k_chunks > 1 ? m : std::min(m, kBlockRows);
  float* park = kp > kBlockK ? ThreadScratch<float, Slot::kPartialSums>(park_rows * kBlockCols * kLanes) : nullptr;
  // Tile calls per packed chunk, at most (each row block may end in a partial row tile).
  const int64_t tiles_per_chunk = ((m + kPackRows - 1) / kPackRows + (m + kBlockRows - 1) / kBlockRows) *
                                  ((kc + kBlockK - 1) / kBlockK) * (kBlockCols / kPackCols);
  for (int64_t jc = j_begin; jc < j_end; jc += kBlockCols) {
    const int64_t nc = std::min(kBlockCols, j_end - jc);
    for (int64_t c0 = 0; c0 < kp; c0 += kc) {
      const int64_t c1 = std::min(c0 + kc, kp);
      if (!p.w_tiled) PackColumns(p, jc, nc, c0, c1, packed);
      // What the next chunk reads: these columns' next k values, else the next block's first ones
      // (row by row, or tiled: group by group).
      const int64_t next_j = c1 < kp ? jc : jc + nc;
      const int64_t next_cols = c1 < kp ? nc : std::clamp<int64_t>(j_end - next_j, 0, kBlockCols);
      const int64_t next_q = c1 < kp ? c1 : 0;
      const int64_t rows_per_range = p.w_tiled ? kTileRows : 1;
      SpreadPrefetch next(p.w + next_j * p.k + next_q * rows_per_range,
                          (next_cols + rows_per_range - 1) / rows_per_range, p.k * 2 * rows_per_range,
                          (std::min(next_q + kc, p.k) - next_q) * 2 * rows_per_range, tiles_per_chunk);
      for (int64_t i0 = i_begin; i0 < i_end; i0 += kBlockRows) {
        const int64_t i1 = std::min(i_end, i0 + kBlockRows);
        float* block_park =
            park == nullptr ? nullptr : park + (k_chunks > 1 ? i0 - i_begin : 0) * kBlockCols * kLanes;
        for (int64_t q0 = c0; q0 < c1; q0 += kBlockK) {
          const int64_t q1 = std::min(q0 + kBlockK, c1);
          for (int64_t i = i0; i < i1; i += kPackRows) {
            const int64_t rows = std::min<int64_t>(kPackRows, i1 - i);
            for (int64_t t = 0; t < nc; t += kPackCols) {
              next.Step();
              const PackedWeights w =
                  p.w_tiled ? TiledGroup(p, jc + t) : PackedWeights{packed + t * (c1 - c0), c0, kPackCols};
              kPackedTiles[rows - 1][std::min<int64_t>(kPackCols, nc - t) - 1](
                  p, i, jc + t, w, q0, q1,
                  block_park ? block_park + ((i - i0) * kBlockCols + t) * kLanes : nullptr, kBlockCols);
            }
          }
        }
      }
    }
  }
}

}  // namespace

void Avx512Bf16Columns(const Avx512Bf16Problem& p, int64_t j_begin, int64_t j_end) {
  if (p.m <= kStreamMaxRows) {
    StreamColumns(p, j_begin, j_end);
  } else {
    // Rows are taken kSuperBytes of x at a time (544 rows at k = 3840, 136 at 15360), so they stay in L3
    // while every column block passes over them, at the cost of packing each column block once per
    // pass (~4 % at 512 rows).
    const int64_t row_bytes = RoundUp(p.k, kAvx512KStep) * 2;
    const int64_t super_rows = std::max<int64_t>(kPackRows, kSuperBytes / row_bytes / kPackRows * kPackRows);
    for (int64_t i = 0; i < p.m; i += super_rows) PackedColumns(p, i, std::min(p.m, i + super_rows), j_begin, j_end);
  }
}

}  // namespace layerpipe::matmul_internal
