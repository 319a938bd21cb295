// The body of the pair-order matmul kernels, shared by the AVX-512 BF16 kernel (matmul_avx512.cc:
// vdpbf16ps on bf16 x) and the AVX-512F one (matmul_avx512f.cc: fused multiply-adds on fp32 x). Both
// keep an fp32 lane per output column and read the weights as pairs of k of 16 weight rows a vector (the
// order engine/model/tiled_rows.h stores); they differ only in the products of one pair, Dot::Pair.
// Every (row, column) runs one chain whatever the row count or thread split, so m changes speed, never
// bits:
//  - streaming (decode, m <= kStreamMaxRows): each weight is read once, straight from memory, by a
//    tile that holds all the rows;
//  - blocked (prefill): a group of 48 weight rows, kPackPairs pairs of k at a time, stays in L2 while
//    every row tile of x passes over it; partial sums (one vector per 16 outputs) are parked between
//    k chunks;
//  - weights stored tiled at load (engine/model/tiled_rows.h) are already in the pair order: both
//    paths read them in place, a group as one stream. Row-major weights are transposed 16 rows x 16
//    pairs at a time in registers (used there by decode of one or two rows, stored to L1 for up to 8
//    rows, to the L2 block for prefill).
//
// A textual include, not an interface: the including file defines, inside its own anonymous namespace
// (each instance is compiled for its own target), LP_PAIR_TARGET (the target attribute every function
// here carries) and `struct Dot` with
//   using X = ...;                        x's element type in a row (bf16 pairs: uint32_t; fp32: float)
//   static int64_t RowStride(int64_t ldx) x's row stride in X elements, from PairProblem::ldx
//   static constexpr int64_t kLdxBytes;   bytes per unit of ldx
//   static constexpr int kPairRowsMax;    rows up to which decode reads two tiled groups at once
//   static constexpr bool kWidensInBlock; x is fp32 and prefill may widen a block once (widen_block)
//   template <int S, int R, int V> static void Pair(const X* x, int64_t ldx, int64_t p,
//       const __m512i (&w)[S][V], __m512 (&acc)[S][R][V]);   acc[s][r][v] += x row r's pair p . w[s][v]
// and then PairColumns(p, j_begin, j_end) computes y[:, j_begin:j_end). Its callers check the CPU first.
constexpr int kLanes = 16;
// Register tiles: up to 8 rows x 3 vectors of 16 columns (one tiled group): 24 accumulators, 3 weight
// vectors (and for fp32 x their 3 widened values) and a broadcast of 32 zmm registers. A step of k
// loads 3 vectors and 8 pairs for 24 vdpbf16ps: ~100 % of the instruction's peak in isolation on Zen 5,
// where the former layout (a lane per 2 values of k, summed across lanes at the end) reached ~90 % with
// the same loads per product.
constexpr int kTileRowsX = 8;
constexpr int kVectors = kTileRows / kLanes;
static_assert(kTileRows % kLanes == 0, "a tiled group is whole vectors");
// Decode: up to this many rows take the streaming path, in a single row tile.
constexpr int64_t kStreamMaxRows = kTileRowsX;
// Pairs of k a decode tile transposes from row-major weights at once (one Transpose16): 3 KiB in L1.
constexpr int64_t kStreamPairs = kLanes;
// Most pairs of k in a prefill block: 48 rows x 2048 pairs are 384 KiB (of a 1 MiB L2).
constexpr int64_t kPackPairs = 2048;
// Up to kFewRows rows, blocks of half as many pairs: then x's part for a chunk (64 rows: 240 KiB at
// k = 3840) stays in L2 beside this block and the next (180 KiB each) rather than being read again
// from L3 for every group, which a neighbour on a shared L3 slows. 64 rows on a 2-core Zen 5 VM,
// alternating calls: 1-5 % faster; 128 rows (x 480 KiB even then) 0-2 % slower, so not there.
constexpr int64_t kFewRows = 64;
constexpr int64_t kFewRowsPackPairs = kPackPairs / 2;
// Rows of x per pass over all column groups: every group reads them again (from L3 while they fit),
// and every pass streams all the weights again. At most kPassBytes of x and kPassRows rows: on a 2-core
// Zen 5 VM a 512-row chunk of down_proj's x (15 MiB) in one pass ran 3-6 % faster than in four, while
// 4096 rows of the k = 3840 shapes ran 4-13 % faster (alternating calls) in passes of 256-512 rows than
// in passes of 16 MiB (2184 rows): x that large does not stay in L3 beside the y each pass writes.
constexpr int64_t kPassBytes = int64_t{16} << 20;
constexpr int64_t kPassRows = 512;
// How far ahead (in weight elements, 512 bytes) decode prefetches each row-major weight row: 16 rows
// read 64 bytes at a time are more streams than the hardware prefetchers follow. (1-2 KiB, which suit
// the AVX2 order's 3 rows at a time, read up to 10 % fewer GB/s here: 16 rows x 2 KiB crowd L1.)
constexpr int64_t kPrefetchAhead = 256;

LP_PAIR_TARGET inline __mmask16 LaneMask(int64_t lanes) {
  return lanes >= kLanes ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << std::max<int64_t>(lanes, 0)) - 1);
}

// Weights in the pair order: for each pair p, 32-bit lanes (one per weight row, 16 to a vector) for
// `cols` rows, `stride` lanes from one pair to the next, starting at pair p0. A tiled group read in
// place (stride = its rows; a thread's range may start or end inside it) or a transposed block
// (stride 48). Lanes past cols are masked off where kMasked (a partial last vector of tiled weights,
// which may be the matrix's last lanes).
struct Panel {
  const uint32_t* base;
  int64_t p0;
  int64_t stride;
  __mmask16 masks[kVectors];
};

Panel MakePanel(const uint32_t* base, int64_t p0, int64_t stride, int64_t cols) {
  Panel panel{base, p0, stride, {}};
  for (int v = 0; v < kVectors; ++v) panel.masks[v] = LaneMask(cols - v * kLanes);
  return panel;
}

// Columns [j, j + cols) of tiled weights (within one group), from pair p0.
Panel TiledPanel(const PairProblem& p, int64_t j, int64_t cols, int64_t p0) {
  int64_t stride = 0;
  const uint32_t* pairs = TiledPairs(p, j, p0, &stride);
  return MakePanel(pairs, p0, stride, cols);
}
inline bool NeedsMask(int64_t cols) { return cols % kLanes != 0; }

// How a tile prefetches weights while it computes: not at all (the block is in L2), the next block a
// line per step (prefill: a LineWalk, one line per step of a tile's arithmetic rather than hundreds at
// the start of each tile: at 64-row prefill a burst of ~700 lines per tile left the next block late, as
// Zen 4+ drops T1 prefetches that find no free miss buffer; spread out, m = 64 ran 8-11 % faster on a
// 2-core Zen 5 VM), or its own stream 16 KiB ahead (decode, where the
// weights come from DRAM as they are read: 7-12 % more GB/s than the hardware prefetchers alone
// reached on a 2-core Zen 5 VM, any distance from 8 to 32 KiB), into L1, or on Intel cores
// (DecodePrefetchesToL2) into L2 and from there into L1 2 KiB ahead: a T0 prefetch from DRAM holds one
// of the core's few L1 miss buffers until its line arrives, so the demand loads behind it wait for
// one, where a T2 prefetch goes to L2's larger queue and the near T0 finds its line in L2. m = 1 on a
// 2-core Emerald Rapids VM, alternating runs, % of a plain read on 512-bit loads: into L1 83-92 %,
// into L2 alone 88-96 %, with the near prefetch 97-109 %.
enum class Prefetch { kNone, kNextBlock, kAhead, kAheadToL2 };
constexpr int64_t kStreamAhead = 4096;  // 32-bit pairs
constexpr int64_t kStreamNear = 512;

// acc[s][r][v] += over pairs p in [p_begin, p_end): x[r] pair p (broadcast) . panel s's pair p, vector v.
// Several panels at once are several weight streams (decode: see StreamTiledColumns).
// Always inlined: called out of line, acc would live in memory.
template <int S, int R, int V, bool kMasked, Prefetch kPrefetch>
LP_PAIR_TARGET __attribute__((always_inline)) inline void AccumulateStreams(const Dot::X* x, int64_t ldx,
                                                                            const Panel* w, int64_t p_begin,
                                                                            int64_t p_end, __m512 (&acc)[S][R][V],
                                                                            LineWalk walk = {}) {
  const uint32_t* wp[S];
#pragma GCC unroll 2
  for (int s = 0; s < S; ++s) wp[s] = w[s].base + (p_begin - w[s].p0) * w[s].stride;
  for (int64_t p = p_begin; p < p_end; ++p) {
    if constexpr (kPrefetch == Prefetch::kNextBlock) walk.Step();
    __m512i wv[S][V];
#pragma GCC unroll 2
    for (int s = 0; s < S; ++s) {
      if constexpr (kPrefetch == Prefetch::kAhead || kPrefetch == Prefetch::kAheadToL2) {
        constexpr _mm_hint kHint = kPrefetch == Prefetch::kAheadToL2 ? _MM_HINT_T2 : _MM_HINT_T0;
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) {
          _mm_prefetch(reinterpret_cast<const char*>(wp[s] + v * kLanes + kStreamAhead), kHint);
          if constexpr (kPrefetch == Prefetch::kAheadToL2) {
            _mm_prefetch(reinterpret_cast<const char*>(wp[s] + v * kLanes + kStreamNear), _MM_HINT_T0);
          }
        }
      }
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) {
        wv[s][v] = kMasked ? _mm512_maskz_loadu_epi32(w[s].masks[v], wp[s] + v * kLanes)
                           : _mm512_loadu_si512(wp[s] + v * kLanes);
      }
      wp[s] += w[s].stride;
    }
    Dot::template Pair<S, R, V>(x, ldx, p, wv, acc);
  }
}

// One panel: acc viewed as the single stream's accumulators (the same array, one level deeper).
template <int R, int V, bool kMasked, Prefetch kPrefetch>
LP_PAIR_TARGET __attribute__((always_inline)) inline void Accumulate(const Dot::X* x, int64_t ldx, const Panel& w,
                                                                     int64_t p_begin, int64_t p_end,
                                                                     __m512 (&acc)[R][V], LineWalk walk = {}) {
  AccumulateStreams<1, R, V, kMasked, kPrefetch>(x, ldx, &w, p_begin, p_end,
                                                 reinterpret_cast<__m512 (&)[1][R][V]>(acc), walk);
}

// Row i of the activations, in the dot product's element type (Dot::X), and the distance between rows.
inline const Dot::X* XPairs(const PairProblem& p, int64_t i) {
  return static_cast<const Dot::X*>(p.x) + i * Dot::RowStride(p.ldx);
}
inline int64_t XPairStride(const PairProblem& p) { return Dot::RowStride(p.ldx); }

// y[i + r][j + (16v + lane) * step] = acc[r][v][lane] for the first `cols` columns.
template <int R, int V>
LP_PAIR_TARGET void Store(const PairProblem& p, int64_t i, int64_t j, int64_t cols, const __m512 (&acc)[R][V],
                          int64_t step = 1) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* y = p.y + (i + r) * p.n + j;
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      if (step == 1) {
        _mm512_mask_storeu_ps(y + v * kLanes, LaneMask(cols - v * kLanes), acc[r][v]);
        continue;
      }
      alignas(64) float lanes[kLanes];
      _mm512_store_ps(lanes, acc[r][v]);
      for (int64_t l = 0; l < std::min<int64_t>(kLanes, cols - v * kLanes); ++l) y[(v * kLanes + l) * step] = lanes[l];
    }
  }
}

// A prefill tile's sums: +0 for the chunk that starts k, else those parked (a row's vectors one after
// another, rows park_ld floats apart) by the chunk before; the chunk that ends k writes y, the others park.
template <int R, int V>
LP_PAIR_TARGET __attribute__((always_inline)) inline void LoadPartialSums(bool first, const float* park,
                                                                          int64_t park_ld, __m512 (&acc)[R][V]) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = first ? _mm512_setzero_ps() : _mm512_load_ps(park + r * park_ld + v * kLanes);
  }
}
template <int R, int V>
LP_PAIR_TARGET __attribute__((always_inline)) inline void FinishTile(const PairProblem& p, int64_t i, int64_t j,
                                                                     int64_t cols, bool last, float* park,
                                                                     int64_t park_ld, const __m512 (&acc)[R][V]) {
  if (last) {
    Store<R, V>(p, i, j, cols, acc);
    return;
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm512_store_ps(park + r * park_ld + v * kLanes, acc[r][v]);
  }
}

// Widened blocks (Dot::kWidensInBlock and PairProblem::widen_block: where the vector shifts and masks
// that widen bf16 in registers take the FMA ports' slots, as on Intel cores, 6 of every 54 per pair in
// Tile): from kWidenedMinRows rows, each block of pairs is widened once to fp32, value 2q + e of the
// 48 columns at out[(2q + e) * kTileRows ..], by the first row tile, and the others read it with no ALU
// work. On a 2-core Emerald Rapids VM, one thread, weights from DRAM, % of the 512-bit FMA peak: 48 rows
// 84 -> 87, 64 rows 83 -> 89, 128 rows 81 -> 90, 256 rows 82 -> 90; 16 and 32 rows a wash. (Widened in
// a pass of its own before the tiles, 64 rows fell to 82 % and 32 rows to 68 %: the pass cost about a
// row tile.)
constexpr int64_t kWidenedPairs = 512;  // 192 KiB of fp32, in L2 beside x's part and the next block
constexpr int64_t kWidenedMinRows = 48;

// Tile over a widened block (pairs [p_begin, p_end) at `block`), the products in Dot::Pair's order:
// value 2q for every row, then 2q + 1. The block's first row tile (kWiden) widens the pairs of `raw` in
// registers as Tile does and stores them to the block for the others (lanes past cols zero), which
// costs it 6 stores a pair rather than a pass of its own over the block. Store writes only cols.
template <int R, int V, bool kWiden>
LP_PAIR_TARGET void WidenedTile(const PairProblem& p, int64_t i, int64_t j, int64_t cols, const Panel& raw,
                                float* block, int64_t p_begin, int64_t p_end, float* park, int64_t park_ld,
                                LineWalk walk) {
  __m512 acc[R][V];
  LoadPartialSums(p_begin == 0, park, park_ld, acc);
  const float* x = static_cast<const float*>(p.x) + i * p.ldx + 2 * p_begin;
  const uint32_t* src = raw.base + (p_begin - raw.p0) * raw.stride;
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t q = p_begin; q < p_end; ++q, x += 2, block += 2 * kTileRows, src += raw.stride) {
    walk.Step();
    __m512i pairs[V];
    if constexpr (kWiden) {
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) pairs[v] = _mm512_maskz_loadu_epi32(raw.masks[v], src + v * kLanes);
    }
#pragma GCC unroll 2
    for (int e = 0; e < 2; ++e) {
      __m512 w[V];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) {
        float* at = block + e * kTileRows + v * kLanes;
        if constexpr (kWiden) {
          w[v] = _mm512_castsi512_ps(e == 0 ? _mm512_slli_epi32(pairs[v], 16) : _mm512_and_si512(pairs[v], high));
          _mm512_store_ps(at, w[v]);
        } else {
          w[v] = _mm512_load_ps(at);
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512 xb = _mm512_set1_ps(x[r * p.ldx + e]);
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(xb, w[v], acc[r][v]);
      }
    }
  }
  FinishTile(p, i, j, cols, p_end == Pairs(p), park, park_ld, acc);
}

// Rows i.. x columns [j, j + cols) over pairs [p_begin, p_end), partial sums parked between k chunks.
template <int R, int V, bool kMasked>
LP_PAIR_TARGET void Tile(const PairProblem& p, int64_t i, int64_t j, int64_t cols, const Panel& w,
                         int64_t p_begin, int64_t p_end, float* park, int64_t park_ld, LineWalk walk) {
  __m512 acc[R][V];
  LoadPartialSums(p_begin == 0, park, park_ld, acc);
  Accumulate<R, V, kMasked, Prefetch::kNextBlock>(XPairs(p, i), XPairStride(p), w, p_begin, p_end, acc, walk);
  FinishTile(p, i, j, cols, p_end == Pairs(p), park, park_ld, acc);
}

// Row-major weight rows j, j + step, .. (rows <= 16 of them), pairs [pb, pb + 16) of each, one row a
// register, transposed: r[q] holds pair pb + q of the 16 rows. Values past k read as zeros, as x's
// padding does, so a pair straddling k's end is (w, 0) and pairs past it add exact zeros.
LP_PAIR_TARGET __attribute__((always_inline)) inline void LoadPairs16(const PairProblem& p, int64_t j, int64_t rows,
                                                                      int64_t pb, bool prefetch, __m512i (&r)[kLanes],
                                                                      int64_t step) {
  const int64_t values = std::clamp<int64_t>(p.k - 2 * pb, 0, 2 * kLanes);
  const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << values) - 1);
  const uint16_t* src = p.w + j * p.k + 2 * pb;
  const int64_t ld = step * p.k;
  if (rows == kLanes && values == 2 * kLanes) {  // the common case, without a check per row
#pragma GCC unroll 16
    for (int row = 0; row < kLanes; ++row, src += ld) {
      if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(src + kPrefetchAhead), _MM_HINT_T0);
      r[row] = _mm512_loadu_si512(src);
    }
  } else {
#pragma GCC unroll 16
    for (int row = 0; row < kLanes; ++row, src += ld) {
      r[row] = row < rows ? _mm512_maskz_loadu_epi16(mask, src) : _mm512_setzero_si512();
    }
  }
  avx512_transpose::Transpose16(r);
}

// Row-major weight rows j, j + step, .. (cols of them) over pairs [p_begin, p_end) (p_begin a multiple
// of 16) into `out` in the pair order, kTileRows lanes a pair (lanes past cols are not written);
// `prefetch` for decode, where the rows come from DRAM as they are read.
// Inlined where accumulators are live across it (a call would spill them: every zmm register is
// caller-saved); Transpose is the out-of-line copy.
LP_PAIR_TARGET __attribute__((always_inline)) inline void TransposeInline(const PairProblem& p, int64_t j,
                                                                          int64_t cols, int64_t p_begin,
                                                                          int64_t p_end, uint32_t* out,
                                                                          bool prefetch, int64_t step = 1) {
  for (int64_t v = 0; v * kLanes < cols; ++v) {
    for (int64_t pb = p_begin; pb < p_end; pb += kLanes) {
      __m512i r[kLanes];
      LoadPairs16(p, j + v * kLanes * step, std::min<int64_t>(kLanes, cols - v * kLanes), pb, prefetch, r, step);
      uint32_t* at = out + (pb - p_begin) * kTileRows + v * kLanes;
      if (p_end - pb >= kLanes) {  // unrolled, so that r stays in registers
#pragma GCC unroll 16
        for (int q = 0; q < kLanes; ++q) _mm512_store_si512(at + q * kTileRows, r[q]);
        continue;
      }
      for (int64_t q = 0; q < p_end - pb; ++q) _mm512_store_si512(at + q * kTileRows, r[q]);
    }
  }
}

LP_PAIR_TARGET void Transpose(const PairProblem& p, int64_t j, int64_t cols, int64_t p_begin, int64_t p_end,
                              uint32_t* out) {
  TransposeInline(p, j, cols, p_begin, p_end, out, /*prefetch=*/false);
}

// Products of R rows' pairs [pb, pb + count) with transposed weight registers (count <= 16).
template <int R, bool kFull>
LP_PAIR_TARGET __attribute__((always_inline)) inline void FeedPairs(const Dot::X* x, int64_t ldx, int64_t pb,
                                                                    int64_t count, const __m512i (&r)[kLanes],
                                                                    __m512 (&acc)[R]) {
#pragma GCC unroll 16
  for (int q = 0; q < (kFull ? kLanes : count); ++q) {
    Dot::template Pair<1, R, 1>(x, ldx, pb + q, reinterpret_cast<const __m512i (&)[1][1]>(r[q]),
                                reinterpret_cast<__m512 (&)[1][R][1]>(acc));
  }
}

// Decode of one or two rows on row-major weights: each transposed register feeds the products
// directly (~12 % faster cache-hot than storing the transposed block to L1 and reloading it, the path
// for more rows, whose accumulators would not fit beside the 16 registers). Full blocks of 16 pairs
// run without a bound check so the accumulators stay in registers.
template <int R, int V>
LP_PAIR_TARGET void StreamRowMajorFew(const PairProblem& p, int64_t j, int64_t cols, int64_t step,
                                      __m512 (&acc)[R][V]) {
  const int64_t pairs = Pairs(p);
  const Dot::X* x = XPairs(p, 0);
  const int64_t ldx = XPairStride(p);
  __m512 a[V][R];
#pragma GCC unroll 3
  for (int v = 0; v < V; ++v) {
#pragma GCC unroll 2
    for (int rr = 0; rr < R; ++rr) a[v][rr] = acc[rr][v];
  }
  for (int64_t pb = 0; pb < pairs; pb += kLanes) {
    const int64_t count = std::min<int64_t>(kLanes, pairs - pb);
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) {
      __m512i r[kLanes];
      LoadPairs16(p, j + v * kLanes * step, std::min<int64_t>(kLanes, cols - v * kLanes), pb, /*prefetch=*/true, r,
                  step);
      if (count == kLanes) {
        FeedPairs<R, true>(x, ldx, pb, count, r, a[v]);
      } else {
        FeedPairs<R, false>(x, ldx, pb, count, r, a[v]);
      }
    }
  }
#pragma GCC unroll 3
  for (int v = 0; v < V; ++v) {
#pragma GCC unroll 2
    for (int rr = 0; rr < R; ++rr) acc[rr][v] = a[v][rr];
  }
}

// Decode of all m rows over the whole of k on one tiled panel, prefetching ahead into L1 or L2.
template <int R, int V, bool kMasked>
LP_PAIR_TARGET __attribute__((always_inline)) inline void StreamPanel(const PairProblem& p, const Panel& w, bool to_l2,
                                                                      __m512 (&acc)[R][V]) {
  if (to_l2) {
    Accumulate<R, V, kMasked, Prefetch::kAheadToL2>(XPairs(p, 0), XPairStride(p), w, 0, Pairs(p), acc);
  } else {
    Accumulate<R, V, kMasked, Prefetch::kAhead>(XPairs(p, 0), XPairStride(p), w, 0, Pairs(p), acc);
  }
}

// Decode: all m rows x one group of columns (row-major weights: columns j, j + step, ..), over the whole
// of k.
template <int R, int V>
LP_PAIR_TARGET void StreamTile(const PairProblem& p, int64_t j, int64_t cols, int64_t step) {
  __m512 acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  const int64_t pairs = Pairs(p);
  if (p.w_tiled) {
    const Panel w = TiledPanel(p, j, cols, 0);
    static const bool to_l2 = DecodePrefetchesToL2();
    if (NeedsMask(cols)) {
      StreamPanel<R, V, true>(p, w, to_l2, acc);
    } else {
      StreamPanel<R, V, false>(p, w, to_l2, acc);
    }
  } else if constexpr (R <= 2) {
    StreamRowMajorFew<R, V>(p, j, cols, step, acc);
  } else {
    alignas(64) uint32_t block[kStreamPairs * kTileRows];
    const Panel w = MakePanel(block, 0, kTileRows, cols);
    for (int64_t pb = 0; pb < pairs; pb += kStreamPairs) {
      const int64_t pe = std::min(pairs, pb + kStreamPairs);
      TransposeInline(p, j, cols, pb, pe, block, /*prefetch=*/true, step);
      Panel at = w;
      at.p0 = pb;
      Accumulate<R, V, false, Prefetch::kNone>(XPairs(p, 0), XPairStride(p), at, pb, pe, acc);
    }
  }
  Store<R, V>(p, 0, j, cols, acc, step);
}

// Decode on tiled weights: all m rows x two whole groups, [ja, ja + 48) and [jb, jb + 48), over the
// whole of k, as two streams, each prefetched ahead where kPrefetch is kAhead (StreamTiledColumns).
template <int R, Prefetch kPrefetch>
LP_PAIR_TARGET void StreamGroupPair(const PairProblem& p, int64_t ja, int64_t jb) {
  __m512 acc[2][R][kVectors];
#pragma GCC unroll 2
  for (int s = 0; s < 2; ++s) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) acc[s][r][v] = _mm512_setzero_ps();
    }
  }
  const Panel w[2] = {TiledPanel(p, ja, kTileRows, 0), TiledPanel(p, jb, kTileRows, 0)};
  AccumulateStreams<2, R, kVectors, false, kPrefetch>(XPairs(p, 0), XPairStride(p), w, 0, Pairs(p), acc);
  Store<R, kVectors>(p, 0, ja, kTileRows, acc[0]);
  Store<R, kVectors>(p, 0, jb, kTileRows, acc[1]);
}

using StreamFn = void (*)(const PairProblem&, int64_t, int64_t, int64_t);
using PairFn = void (*)(const PairProblem&, int64_t, int64_t);
using TileFn = void (*)(const PairProblem&, int64_t, int64_t, int64_t, const Panel&, int64_t, int64_t, float*,
                        int64_t, LineWalk);
template <int R, int V>
struct StreamEntry {
  static constexpr StreamFn kFn = &StreamTile<R, V>;
};
template <int R, int V>
struct FullEntry {
  static constexpr TileFn kFn = &Tile<R, V, false>;
};
template <int R, int V>
struct MaskedEntry {
  static constexpr TileFn kFn = &Tile<R, V, true>;
};
using WidenedTileFn = void (*)(const PairProblem&, int64_t, int64_t, int64_t, const Panel&, float*, int64_t, int64_t,
                               float*, int64_t, LineWalk);
template <bool kWiden>
struct WidenedEntries {
  template <int R, int V>
  struct Entry {
    static constexpr WidenedTileFn kFn = &WidenedTile<R, V, kWiden>;
  };
};
constexpr auto kStreamTiles = TileTable<StreamEntry, kTileRowsX, kVectors>();
// [DecodePrefetchesToL2][rows - 1].
constexpr PairFn kGroupPairs[2][4] = {
    {&StreamGroupPair<1, Prefetch::kNone>, &StreamGroupPair<2, Prefetch::kNone>, &StreamGroupPair<3, Prefetch::kNone>,
     &StreamGroupPair<4, Prefetch::kNone>},
    {&StreamGroupPair<1, Prefetch::kAheadToL2>, &StreamGroupPair<2, Prefetch::kAheadToL2>,
     &StreamGroupPair<3, Prefetch::kAheadToL2>, &StreamGroupPair<4, Prefetch::kAheadToL2>}};
constexpr int kPairRowsMax = Dot::kPairRowsMax;
static_assert(kPairRowsMax <= static_cast<int>(std::size(kGroupPairs[0])));
constexpr auto kFullTiles = TileTable<FullEntry, kTileRowsX, kVectors>();
constexpr auto kMaskedTiles = TileTable<MaskedEntry, kTileRowsX, kVectors>();
// [the tile widens the block][rows - 1][vectors - 1].
constexpr decltype(TileTable<WidenedEntries<false>::Entry, kTileRowsX, kVectors>()) kWidenedTiles[2] = {
    TileTable<WidenedEntries<false>::Entry, kTileRowsX, kVectors>(),
    TileTable<WidenedEntries<true>::Entry, kTileRowsX, kVectors>()};

int64_t VectorsFor(int64_t cols) { return (cols + kLanes - 1) / kLanes; }

// Row-major weights are read 16 rows at a time, not a group of 48 (48 rows advancing 64 bytes at a time
// are more streams than a core keeps in flight: 16 rows read 10-40 % more GB/s on a 2-core Zen 5 VM),
// the 16 from 16 parts of the thread's columns, so that each continues where the last tile's ended
// (ForSegmentedTiles): on a 2-core Zen 5 VM, alternating runs, m = 1 read 5-10 % more GB/s (then
// ~50-65 % of a plain read; 82-95 % since the transposes stay in registers), m = 8 22 -> 28-31 GB/s.
// Tiled weights, a group at a time.
void StreamColumns(const PairProblem& p, int64_t j_begin, int64_t j_end) {
  if (!p.w_tiled) {
    ForSegmentedTiles(j_begin, j_end, kLanes, [&p](int64_t j, int64_t step, int64_t cols) {
      kStreamTiles[p.m - 1][0](p, j, cols, step);
    });
    return;
  }
  for (int64_t j = j_begin; j < j_end;) {
    const int64_t cols = GroupCols(p, j, j_end);
    kStreamTiles[p.m - 1][VectorsFor(cols) - 1](p, j, cols, 1);
    j += cols;
  }
}

// Tiled weights: a group is one stream, and a core reads one stream with arithmetic between the loads
// slower than a plain read of it. Up to kPairRowsMax rows the whole groups go two at a time, one from
// each half of the thread's groups (ForSegmentedTiles): m = 1 on a 2-core Zen 5 VM, alternating in one
// process, one stream read 87-106 % of the GB/s of a plain read of the same bytes, two 97-110 %. The
// pairs run without software prefetch there, which made them 5-15 % slower; on Intel cores they
// prefetch each stream ahead (DecodePrefetchesToL2), into L2 (Prefetch): on a 2-core Emerald Rapids
// VM, alternating runs, m = 1 90-95 -> 95-105 % of a plain read on 256-bit loads, m = 2 82-91 ->
// 93-101 % (into L1; into L2 with the near prefetch, m = 1 97-105 % of a plain read on 512-bit loads,
// m = 2 95-99 %). A thread's first and last group may be partial (ranges split groups; the matrix's
// last may be short), and go alone.
void StreamTiledColumns(const PairProblem& p, int64_t j_begin, int64_t j_end) {
  if (p.m > kPairRowsMax) {
    StreamColumns(p, j_begin, j_end);
    return;
  }
  const int64_t full_begin = std::min(RoundUp(j_begin, kTileRows), j_end);
  const int64_t full_end = std::max(full_begin, j_end / kTileRows * kTileRows);
  StreamColumns(p, j_begin, full_begin);
  const PairFn pair = kGroupPairs[DecodePrefetchesToL2()][p.m - 1];
  const auto groups_at = [&p, pair](int64_t g, int64_t step, int64_t groups) {
    if (groups == 2) {
      pair(p, g * kTileRows, (g + step) * kTileRows);
    } else {
      StreamColumns(p, g * kTileRows, (g + 1) * kTileRows);
    }
  };
  ForSegmentedTiles(full_begin / kTileRows, full_end / kTileRows, 2, groups_at);
  StreamColumns(p, full_end, j_end);
}

// Rows [i_begin, i_end) of columns [j_begin, j_end), a group at a time, k in chunks of at most
// kPackPairs pairs (kFewRowsPackPairs for few rows), so the block stays in L2 however long k is
// (down_proj: 15360).
void BlockedColumns(const PairProblem& p, int64_t i_begin, int64_t i_end, int64_t j_begin, int64_t j_end) {
  const int64_t pairs = Pairs(p);
  const int64_t m = i_end - i_begin;
  const bool widen = Dot::kWidensInBlock && p.widen_block && m >= kWidenedMinRows;
  const int64_t most_pairs = widen ? kWidenedPairs : m <= kFewRows ? kFewRowsPackPairs : kPackPairs;
  const int64_t chunk = EqualPart(pairs, most_pairs, kLanes);
  uint32_t* packed = p.w_tiled ? nullptr : ThreadScratch<uint32_t, Slot::kPackedWeights>(chunk * kTileRows);
  float* park = chunk < pairs ? ThreadScratch<float, Slot::kPartialSums>(m * kTileRows) : nullptr;
  float* widened = widen ? ThreadScratch<float, Slot::kWidenedWeights>(2 * chunk * kTileRows) : nullptr;
  const int64_t row_tiles = (m + kTileRowsX - 1) / kTileRowsX;
  for (int64_t j = j_begin; j < j_end;) {
    const int64_t cols = GroupCols(p, j, j_end);
    const int64_t vectors = VectorsFor(cols);
    for (int64_t c0 = 0; c0 < pairs; c0 += chunk) {
      const int64_t c1 = std::min(c0 + chunk, pairs);
      Panel w;
      bool masked = false;
      if (p.w_tiled) {
        w = TiledPanel(p, j, cols, c0);
        masked = NeedsMask(cols);
      } else {
        Transpose(p, j, cols, c0, c1, packed);
        w = MakePanel(packed, c0, kTileRows, cols);
      }
      const NextBlock next = NextBlockOf(p, j, cols, c1, chunk, j_end);
      if (widen) {
        for (int64_t i = i_begin, t = 0; i < i_end; i += kTileRowsX, ++t) {
          const LineWalk walk = TileWalk(next, t, row_tiles, c1 - c0, w.base);
          const int64_t rows = std::min<int64_t>(kTileRowsX, i_end - i);
          kWidenedTiles[t == 0][rows - 1][vectors - 1](p, i, j, cols, w, widened, c0, c1,
                                                       park ? park + (i - i_begin) * kTileRows : nullptr, kTileRows,
                                                       walk);
        }
        continue;
      }
      const auto& tiles = masked ? kMaskedTiles : kFullTiles;
      for (int64_t i = i_begin, t = 0; i < i_end; i += kTileRowsX, ++t) {
        const LineWalk walk = TileWalk(next, t, row_tiles, c1 - c0, w.base);
        const int64_t rows = std::min<int64_t>(kTileRowsX, i_end - i);
        tiles[rows - 1][vectors - 1](p, i, j, cols, w, c0, c1, park ? park + (i - i_begin) * kTileRows : nullptr,
                                     kTileRows, walk);
      }
    }
    j += cols;
  }
}

void PairColumns(const PairProblem& p, int64_t j_begin, int64_t j_end) {
  if (p.m <= kStreamMaxRows) {
    if (p.w_tiled) {
      StreamTiledColumns(p, j_begin, j_end);
    } else {
      StreamColumns(p, j_begin, j_end);
    }
  } else {
    // Rows are taken in equal passes of at most kPassRows rows and kPassBytes of x, so they stay in L3
    // while every column group passes over them, at the cost of streaming (row-major: transposing) each
    // weight group once per pass. Equal, so that no pass is a short one with little reuse of each block.
    ForRowPasses(p.m, p.ldx * Dot::kLdxBytes, kPassBytes, kPassRows, kTileRowsX,
                 [&](int64_t i0, int64_t i1) { BlockedColumns(p, i0, i1, j_begin, j_end); });
  }
}
