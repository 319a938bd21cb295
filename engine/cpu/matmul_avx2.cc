// AVX2/FMA matmul kernel, in the column order of matmul_kernels.h (an fp32 lane per output column, one
// fused multiply-add per value of k in increasing k): the bits of the AVX-512F kernel, on 256-bit
// registers. Weights are read as pairs of k of 8 weight rows a vector, the order engine/model/
// tiled_rows.h stores them in (row-major weights are transposed 8 rows x 8 pairs at a time).
//
// A group of 48 weight rows is taken a chunk of pairs at a time, and tiles of up to 2 rows x the whole
// group pass over the chunk, the partial sums kept in y between chunks. They read the pairs in place
// (tiled weights; row-major ones are first transposed into a block) and widen them in registers, so
// the weights are never stored widened and loaded again: the first tile over a chunk reads it from
// memory, and from 5 rows on the others bring the next one into L2 meanwhile (NextChunkWalk). Widening
// a pair in every row tile costs two vector ALU operations per four fused multiply-adds; on a 2-core
// Zen 5 VM (paired calls, weights from DRAM) that beat widening each chunk once into an fp32 block in L2
// and tiling 4 rows x 24 columns over it at every m: 16-128 rows 64-82 -> 86-91 % of the FMA peak,
// 256-4096 rows 73-86 -> 78-90 % (the stores and reloads of the widened block were ~10 % of a 64-row
// call). One row goes two whole tiled groups at a time (GroupPair), or on row-major weights 16 rows at
// a time transposed in registers (OneRowRowMajor): more streams per core.
//
// Where widening in registers takes the FMA ports' slots (PairProblem::widen_block: Intel cores, whose
// 256-bit shifts issue only on the two FMA ports), prefill of kBlockMinRows rows or more widens each
// chunk once into an fp32 block in L2 instead (value q of the 48 columns back to back), and tiles of 4
// rows x 24 columns (12 accumulators, 3 weight vectors and a broadcast of the 16 ymm registers) pass
// over it with no vector ALU work. On a 2-core Emerald Rapids VM, one thread, % of the FMA peak,
// weights in L2: 32 rows 68 -> 71, 64 rows 68 -> 79, 256 rows 67 -> 87 (the in-place tiles there: two
// widening operations per four fused multiply-adds, up to a third of the FMA ports' slots). On a whole
// tiled group the block's first row tile (2 rows, in place) stores what it widens, so no pass of its
// own does (WideningTile): `bench_matmul --isa=avx2`, same VM, 2 threads, old and new alternating,
// tiled weights: 32 rows 73-77 -> 77-81 %, 64 rows 80-84 -> 81-87 %, 128 rows 83-88 -> 85-88 %.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "engine/cpu/matmul_kernels.h"
#include "engine/cpu/matmul_prefetch.h"
#include "engine/cpu/tile_table.h"
#include "engine/model/tiled_rows.h"

namespace layerpipe::matmul_internal {
namespace {

constexpr int kLanes = 8;
constexpr int kGroupVectors = kTileRows / kLanes;
static_assert(kTileRows % kLanes == 0, "a tiled group is whole vectors");
// Pairs of k per chunk: 1024 (192 KiB, in L2 for the row tiles after the first), but for up to
// kFewRows rows on row-major weights 64 (the transposed 12 KiB block in L1, rewritten often enough
// that it stays there; from 9 rows on a block of 1024 pairs ran 1-3 % faster than one of 64).
constexpr int64_t kFewRows = 8;
constexpr int64_t kChunkPairs = 1024;
constexpr int64_t kFewRowsTransposedChunkPairs = 64;
// Widened blocks (widen_block, from kBlockMinRows rows): 512 pairs of k (192 KiB of fp32 in L2, reused
// by every row tile), register tiles of kBlockRows rows x kBlockVectors vectors (a half group). Below
// 24 rows the block's tiles gain less than its widening costs (2 threads, same VM: 16 rows 72-74 % in
// place, 64-70 % in a block; 20 rows a wash; 24 rows 71-75 -> 75-79 %).
constexpr int64_t kBlockChunkPairs = 512;
constexpr int kBlockRows = 4;
constexpr int kBlockVectors = 3;
constexpr int64_t kBlockCols = kBlockVectors * kLanes;
constexpr int64_t kBlockMinRows = 24;
static_assert(kTileRows == 2 * kBlockCols);
// Rows of x per pass over all column groups (each group reads them again, from L3 while they fit;
// each pass streams all the weights again): at most kPassRows rows and kPassBytes of x.
constexpr int64_t kPassBytes = int64_t{8} << 20;
constexpr int64_t kPassRows = 512;
// How far ahead the packers prefetch the weights they read from memory: tiled, along the one stream
// (bytes; where decode prefetches into L2, into L1 from there kTiledNearBytes ahead); row-major, along
// each of 8 rows (bf16 values).
constexpr int64_t kTiledAheadBytes = 16384;
constexpr int64_t kTiledNearBytes = 2048;
constexpr int64_t kRowAhead = 512;

// Lanes [0, lanes) of a vector, as AVX2's masked loads and stores take them.
inline __m256i LaneMask(int64_t lanes) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::clamp<int64_t>(lanes, 0, kLanes))), index);
}

// The two fp32 values of 8 columns' pairs: the low half of a pair's 32 bits is the bf16 of value 2p,
// the high half that of 2p + 1.
inline __m256 EvenValues(__m256i pairs) { return _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16)); }
inline __m256 OddValues(__m256i pairs) {
  return _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}
inline void StoreWidened(__m256i pairs, float* even, float* odd) {
  _mm256_store_ps(even, EvenValues(pairs));
  _mm256_store_ps(odd, OddValues(pairs));
}
// acc + x[0] * value 2p + x[1] * value 2p + 1 of 8 columns' pairs, in that order.
inline __m256 AddPairProducts(__m256 acc, const float* x, __m256i pairs) {
  acc = _mm256_fmadd_ps(_mm256_broadcast_ss(x), EvenValues(pairs), acc);
  return _mm256_fmadd_ps(_mm256_broadcast_ss(x + 1), OddValues(pairs), acc);
}

// The lines of a group's pair (up to 48 lanes: 192 bytes) kTiledAheadBytes further on in its stream,
// into L1, or (kToL2: on Intel cores, DecodePrefetchesToL2; see matmul_pair_kernel.h's Prefetch) into
// L2 and from there into L1 kTiledNearBytes ahead. One row on a 2-core Emerald Rapids VM, alternating,
// % of a plain read on 512-bit loads: into L1 81-90 %, into L2 alone 91-95 %, with the near prefetch
// 97-108 %; two rows 73-79, 84-87, 92-97 %.
// Always inlined: inlined by GCC 12's early inliner into a tile through PrefetchStep, its prefetches
// were dropped.
template <bool kToL2>
__attribute__((always_inline)) inline void PrefetchAhead(const uint32_t* pair) {
  const char* at = reinterpret_cast<const char*>(pair);
#pragma GCC unroll 3
  for (int line = 0; line < 3; ++line) {
    _mm_prefetch(at + kTiledAheadBytes + 64 * line, kToL2 ? _MM_HINT_T2 : _MM_HINT_T0);
    if constexpr (kToL2) _mm_prefetch(at + kTiledNearBytes + 64 * line, _MM_HINT_T0);
  }
}

// Block of pairs [p0, p1) of columns [j, j + cols) (within one group) of tiled weights, widened: value
// 2(p - p0) + e of column c at out[(2(p - p0) + e) * kTileRows + c]; columns past cols are zero. The
// block's row tiles brought the pairs into cache while they ran over the block before (TileWalk).
void WidenTiled(const PairProblem& p, int64_t j, int64_t cols, int64_t p0, int64_t p1, float* out) {
  int64_t g = 0;
  const uint32_t* src = TiledPairs(p, j, p0, &g);
  const int vectors = static_cast<int>((cols + kLanes - 1) / kLanes);
  const bool ragged = cols % kLanes != 0;
  const __m256i last = LaneMask(cols - (vectors - 1) * kLanes);
  for (int64_t q = p0; q < p1; ++q, src += g, out += 2 * kTileRows) {
    for (int v = 0; v < vectors; ++v) {
      const int* at = reinterpret_cast<const int*>(src + v * kLanes);
      const __m256i pairs = ragged && v == vectors - 1 ? _mm256_maskload_epi32(at, last)
                                                        : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
      StoreWidened(pairs, out + v * kLanes, out + kTileRows + v * kLanes);
    }
    for (int v = vectors; v < kGroupVectors; ++v) {
      _mm256_store_ps(out + v * kLanes, _mm256_setzero_ps());
      _mm256_store_ps(out + kTileRows + v * kLanes, _mm256_setzero_ps());
    }
  }
}

// The 8 x 8 matrix of 32-bit values in r, transposed in place (unrolled, so the arrays stay in registers).
__attribute__((always_inline)) inline void Transpose8(__m256i (&r)[kLanes]) {
  __m256 a[8], b[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = _mm256_unpacklo_ps(_mm256_castsi256_ps(r[2 * i]), _mm256_castsi256_ps(r[2 * i + 1]));
    a[2 * i + 1] = _mm256_unpackhi_ps(_mm256_castsi256_ps(r[2 * i]), _mm256_castsi256_ps(r[2 * i + 1]));
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    b[4 * i + 0] = _mm256_shuffle_ps(a[4 * i], a[4 * i + 2], 0x44);
    b[4 * i + 1] = _mm256_shuffle_ps(a[4 * i], a[4 * i + 2], 0xee);
    b[4 * i + 2] = _mm256_shuffle_ps(a[4 * i + 1], a[4 * i + 3], 0x44);
    b[4 * i + 3] = _mm256_shuffle_ps(a[4 * i + 1], a[4 * i + 3], 0xee);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_castps_si256(_mm256_permute2f128_ps(b[c], b[4 + c], 0x20));
    r[c + 4] = _mm256_castps_si256(_mm256_permute2f128_ps(b[c], b[4 + c], 0x31));
  }
}

// Pairs [pb, pb + 8) of the row-major weight rows row0, row0 + step, .. (`rows` <= 8 of them),
// transposed: r[q] holds pair pb + q of the 8 rows. Values past k and rows past `rows` read as zeros,
// as x's padding does (a pair straddling k's end is (w, 0)).
__attribute__((always_inline)) inline void LoadPairs8(const PairProblem& p, int64_t row0, int64_t rows, int64_t pb,
                                                      __m256i (&r)[kLanes], int64_t step = 1) {
  const int64_t values = std::clamp<int64_t>(p.k - 2 * pb, 0, 2 * kLanes);
  if (rows == kLanes && values == 2 * kLanes) {  // the common case, without a check per row
    const uint16_t* src = p.w + row0 * p.k + 2 * pb;
#pragma GCC unroll 8
    for (int row = 0; row < kLanes; ++row, src += step * p.k) {
      _mm_prefetch(reinterpret_cast<const char*>(src + kRowAhead), _MM_HINT_T0);
      r[row] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    }
    Transpose8(r);
    return;
  }
  for (int row = 0; row < kLanes; ++row) {
    const uint16_t* src = p.w + (row0 + row * step) * p.k + 2 * pb;
    if (row >= rows) {
      r[row] = _mm256_setzero_si256();
    } else if (values == 2 * kLanes) {
      _mm_prefetch(reinterpret_cast<const char*>(src + kRowAhead), _MM_HINT_T0);
      r[row] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    } else {
      alignas(32) uint16_t tail[2 * kLanes] = {};
      std::memcpy(tail, src, values * sizeof(uint16_t));
      r[row] = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
    }
  }
  Transpose8(r);
}

// Row-major weight rows [j, j + cols) over pairs [p0, p1), 8 rows x 8 pairs at a time, as `store`(q,
// v, pairs) takes them: pair q - p0 of the rows in vector v (rows past cols zero).
template <typename StoreFn>
void TransposeRowMajor(const PairProblem& p, int64_t j, int64_t cols, int64_t p0, int64_t p1, StoreFn&& store) {
  for (int v = 0; v < kGroupVectors; ++v) {
    const int64_t rows = std::clamp<int64_t>(cols - v * kLanes, 0, kLanes);
    for (int64_t pb = p0; pb < p1; pb += kLanes) {
      __m256i r[kLanes];
      LoadPairs8(p, j + v * kLanes, rows, pb, r);
      const int64_t count = std::min<int64_t>(kLanes, p1 - pb);
      for (int64_t q = 0; q < count; ++q) store(pb + q - p0, v, r[q]);
    }
  }
}

// Row-major weights in the tiled order, a block of pairs [p0, p1) of columns [j, j + cols): pair q of
// column c at out[(q - p0) * kTileRows + c].
void PairsRowMajor(const PairProblem& p, int64_t j, int64_t cols, int64_t p0, int64_t p1, uint32_t* out) {
  TransposeRowMajor(p, j, cols, p0, p1, [out](int64_t q, int v, __m256i pairs) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(out + q * kTileRows + v * kLanes), pairs);
  });
}

// WidenTiled's block from row-major weights.
void WidenRowMajor(const PairProblem& p, int64_t j, int64_t cols, int64_t p0, int64_t p1, float* out) {
  TransposeRowMajor(p, j, cols, p0, p1, [out](int64_t q, int v, __m256i pairs) {
    float* at = out + 2 * q * kTileRows + v * kLanes;
    StoreWidened(pairs, at, at + kTileRows);
  });
}

// A tile's sums between chunks live in y (row stride n): acc[r][v] from y, or +0 for a chunk that
// starts k; where `masked`, only the lanes of masks[v] are read and written (a tile past its columns).
// Left rolled, GCC keeps accumulator arrays in memory: every loop over them is unrolled.
template <int R, int V>
__attribute__((always_inline)) inline void LoadSums(const float* y, int64_t n, bool first, bool masked,
                                                    const __m256i (&masks)[V], __m256 (&acc)[R][V]) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      const float* at = y + r * n + v * kLanes;
      acc[r][v] = first ? _mm256_setzero_ps() : masked ? _mm256_maskload_ps(at, masks[v]) : _mm256_loadu_ps(at);
    }
  }
}
template <int R, int V>
__attribute__((always_inline)) inline void StoreSums(float* y, int64_t n, bool masked, const __m256i (&masks)[V],
                                                     const __m256 (&acc)[R][V]) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      float* at = y + r * n + v * kLanes;
      if (masked) {
        _mm256_maskstore_ps(at, masks[v], acc[r][v]);
      } else {
        _mm256_storeu_ps(at, acc[r][v]);
      }
    }
  }
}

// Rows [i, i + R) x widened block columns [h, h + kBlockCols) over the block's `values` values of k, x
// from column q0 on, walking its share of the next chunk into cache a line a step, so the widening
// reads it from there rather than from DRAM (one thread, Emerald Rapids VM, weights from DRAM, with a
// widening pass of its own: 32 rows 67 -> 73 %, 64 rows 76 -> 80 %, 128 rows 81 -> 83 % of the FMA
// peak). The first chunk of k starts from +0, the others from the sums y holds; the first `cols`
// columns of y are written.
template <int R>
void BlockTile(const PairProblem& p, int64_t i, int64_t q0, const float* block, int64_t values, float* y,
               int64_t cols, bool first, LineWalk walk) {
  const float* x = static_cast<const float*>(p.x) + i * p.ldx + q0;
  __m256i masks[kBlockVectors];
#pragma GCC unroll 4
  for (int v = 0; v < kBlockVectors; ++v) masks[v] = LaneMask(cols - v * kLanes);
  const bool masked = cols < kBlockCols;
  __m256 acc[R][kBlockVectors];
  LoadSums(y, p.n, first, masked, masks, acc);
  for (int64_t q = 0; q < values; ++q, block += kTileRows) {
    walk.Step();
    __m256 w[kBlockVectors];
#pragma GCC unroll 4
    for (int v = 0; v < kBlockVectors; ++v) w[v] = _mm256_load_ps(block + v * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 xb = _mm256_broadcast_ss(x + r * p.ldx + q);
#pragma GCC unroll 4
      for (int v = 0; v < kBlockVectors; ++v) acc[r][v] = _mm256_fmadd_ps(xb, w[v], acc[r][v]);
    }
  }
  StoreSums(y, p.n, masked, masks, acc);
}

using BlockTileFn = void (*)(const PairProblem&, int64_t, int64_t, const float*, int64_t, float*, int64_t, bool,
                             LineWalk);
template <int R, int>
struct BlockTileEntry {
  static constexpr BlockTileFn kFn = &BlockTile<R>;
};
constexpr auto kBlockTiles = TileTable<BlockTileEntry, kBlockRows, 1>();

// One pair's products for two rows x a whole group (6 vectors) in assembly: acc[r][v] += x_r[0] ·
// value 2p of vector v, then += x_r[1] · value 2p + 1, the fused multiply-adds of InPlaceTile in its
// order. GCC keeps InPlaceTile's 12 sums, the odd-value mask, a pair's two widened vectors and four
// broadcasts (19 values) in 16 registers by spilling three sums, whose chains then pass through memory
// every step (load, two multiply-adds, store: longer than the step), and reordered by hand in C++ it
// still spilled. Taking the even values for all six vectors and then the odd ones needs one widened
// vector (ymm13) and two broadcasts (ymm14-15) at a time, so the sums and the mask fill the other 13.
// The AVX2 kernel on a 2-core Zen 5 VM, alternating calls: with the weights in L2, 2 rows 153 -> 211
// GFLOP/s and 4 rows 160 -> 220 (~90 % of the FMA peak); from memory 2 rows 11 % and 4 rows 13 % faster.
// kKeep (the first row tile over a widened block, WideningTile): each widened vector is also stored
// to `out`, value 2p of vector v at out[8v], 2p + 1 at out[kTileRows + 8v].
#define LP_EVEN_VALUES(v, offset, keep)                                                                      \
  "vmovdqu " offset "(%[w]), %%ymm13\n\t"                                                                   \
  "vpslld $16, %%ymm13, %%ymm13\n\t" keep(offset)                                                           \
  "vfmadd231ps %%ymm13, %%ymm14, %[a0" v "]\n\t"                                                            \
  "vfmadd231ps %%ymm13, %%ymm15, %[a1" v "]\n\t"
#define LP_ODD_VALUES(v, offset, keep)                                                                       \
  "vpand " offset "(%[w]), %[odd], %%ymm13\n\t" keep("192+" offset)                                         \
  "vfmadd231ps %%ymm13, %%ymm14, %[a0" v "]\n\t"                                                            \
  "vfmadd231ps %%ymm13, %%ymm15, %[a1" v "]\n\t"
#define LP_KEEP(offset) "vmovaps %%ymm13, " offset "(%[out])\n\t"
#define LP_DROP(offset) ""
// The assembler may take an instruction only AVX-512 encodes (a shift of a memory operand is one),
// which would fault on the machines this kernel is for: with AVX-512F off it rejects them instead.
#define LP_GROUP_PAIR(keep)                                                                                  \
  ".arch .noavx512f\n\t"                                                                                    \
  "vbroadcastss (%[x0]), %%ymm14\n\t"                                                                       \
  "vbroadcastss (%[x1]), %%ymm15\n\t"                                                                       \
  LP_EVEN_VALUES("0", "0", keep) LP_EVEN_VALUES("1", "32", keep) LP_EVEN_VALUES("2", "64", keep)             \
  LP_EVEN_VALUES("3", "96", keep) LP_EVEN_VALUES("4", "128", keep) LP_EVEN_VALUES("5", "160", keep)          \
  "vbroadcastss 4(%[x0]), %%ymm14\n\t"                                                                      \
  "vbroadcastss 4(%[x1]), %%ymm15\n\t"                                                                      \
  LP_ODD_VALUES("0", "0", keep) LP_ODD_VALUES("1", "32", keep) LP_ODD_VALUES("2", "64", keep)                \
  LP_ODD_VALUES("3", "96", keep) LP_ODD_VALUES("4", "128", keep) LP_ODD_VALUES("5", "160", keep)             \
  : [a00] "+x"(acc[0][0]), [a01] "+x"(acc[0][1]), [a02] "+x"(acc[0][2]), [a03] "+x"(acc[0][3]),             \
    [a04] "+x"(acc[0][4]), [a05] "+x"(acc[0][5]), [a10] "+x"(acc[1][0]), [a11] "+x"(acc[1][1]),             \
    [a12] "+x"(acc[1][2]), [a13] "+x"(acc[1][3]), [a14] "+x"(acc[1][4]), [a15] "+x"(acc[1][5])              \
  : [x0] "r"(x0), [x1] "r"(x1), [w] "r"(w), [odd] "x"(odd), [out] "r"(out)                                  \
  : "xmm13", "xmm14", "xmm15", "memory"
static_assert(kGroupVectors == 6 && kTileRows == 48, "the assembly step covers a group of 6 vectors");
template <bool kKeep>
__attribute__((always_inline)) inline void TwoRowGroupPair(const float* x0, const float* x1, const uint32_t* w,
                                                           __m256i odd, __m256 (&acc)[2][kGroupVectors],
                                                           float* out = nullptr) {
  if constexpr (kKeep) {
    asm(LP_GROUP_PAIR(LP_KEEP));
  } else {
    asm(LP_GROUP_PAIR(LP_DROP));
  }
}
#undef LP_EVEN_VALUES
#undef LP_ODD_VALUES
#undef LP_KEEP
#undef LP_DROP
#undef LP_GROUP_PAIR

// How a tile prefetches: not at all (a transposed block in L1 or L2), its own stream ahead into L1 or
// L2 (it reads the chunk from memory; PrefetchAhead), or the next chunk (it reads this one from L2:
// NextChunkWalk). Chosen at compile time, per tile.
enum class Prefetch { kNone, kAhead, kNextChunk, kAheadToL2 };
template <Prefetch kPrefetch>
__attribute__((always_inline)) inline void PrefetchStep(LineWalk& walk, const uint32_t* w) {
  if constexpr (kPrefetch == Prefetch::kAhead || kPrefetch == Prefetch::kAheadToL2) {
    PrefetchAhead<kPrefetch == Prefetch::kAheadToL2>(w);
  }
  if constexpr (kPrefetch == Prefetch::kNextChunk) walk.Step();
}

// `pairs` pairs of a whole group (`stride` lanes apart) for rows x and x + ldx, a TwoRowGroupPair a
// pair after its prefetch step; kKeep also stores the widened pairs to `out` (WideningTile).
template <bool kKeep, Prefetch kPrefetch>
__attribute__((always_inline)) inline void TwoRowGroupPairs(const float* x, int64_t ldx, const uint32_t* w,
                                                            int64_t stride, int64_t pairs, LineWalk& walk,
                                                            __m256 (&acc)[2][kGroupVectors], float* out = nullptr) {
  const __m256i odd = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t q = 0; q < pairs; ++q, w += stride) {
    PrefetchStep<kPrefetch>(walk, w);
    TwoRowGroupPair<kKeep>(x + 2 * q, x + ldx + 2 * q, w, odd, acc, kKeep ? out + 2 * q * kTileRows : nullptr);
  }
}

// Rows [i, i + R) x the first `cols` columns (V vectors, the last masked if kMasked) of the group panel
// `w` (pairs `stride` lanes apart) over `pairs` pairs, x from pair p0 on, read in place and widened in
// registers: a whole group's columns in one pass. The first chunk of k starts from +0, the others from
// the sums y holds (row stride n).
template <int R, int V, bool kMasked, Prefetch kPrefetch>
void InPlaceTile(const PairProblem& p, int64_t i, int64_t p0, const uint32_t* w, int64_t stride, int64_t pairs,
                 float* y, int64_t cols, bool first, LineWalk walk) {
  const float* x = static_cast<const float*>(p.x) + i * p.ldx + 2 * p0;
  __m256i masks[V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) masks[v] = LaneMask(cols - v * kLanes);
  __m256 acc[R][V];
  LoadSums(y, p.n, first, kMasked, masks, acc);
  if constexpr (R == 2 && V == kGroupVectors && !kMasked) {
    TwoRowGroupPairs<false, kPrefetch>(x, p.ldx, w, stride, pairs, walk, acc);
    StoreSums(y, p.n, kMasked, masks, acc);
    return;
  }
  for (int64_t q = 0; q < pairs; ++q, w += stride) {
    PrefetchStep<kPrefetch>(walk, w);
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      const int* at = reinterpret_cast<const int*>(w + v * kLanes);
      const __m256i pairs_v = kMasked && v == V - 1 ? _mm256_maskload_epi32(at, masks[v])
                                                     : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
      const __m256 even = EvenValues(pairs_v), odd = OddValues(pairs_v);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        acc[r][v] = _mm256_fmadd_ps(_mm256_broadcast_ss(x + r * p.ldx + 2 * q), even, acc[r][v]);
        acc[r][v] = _mm256_fmadd_ps(_mm256_broadcast_ss(x + r * p.ldx + 2 * q + 1), odd, acc[r][v]);
      }
    }
  }
  StoreSums(y, p.n, kMasked, masks, acc);
}

using InPlaceFn = void (*)(const PairProblem&, int64_t, int64_t, const uint32_t*, int64_t, int64_t, float*, int64_t,
                           bool, LineWalk);
// [kMasked][kPrefetch].
template <bool kMasked, Prefetch kPrefetch>
struct InPlaceEntries {
  template <int R, int V>
  struct Entry {
    static constexpr InPlaceFn kFn = &InPlaceTile<R, V, kMasked, kPrefetch>;
  };
};
constexpr int kInPlaceRows = 2;
template <bool kMasked, Prefetch kPrefetch>
constexpr auto kInPlaceTiles = TileTable<InPlaceEntries<kMasked, kPrefetch>::template Entry, kInPlaceRows, kGroupVectors>();
using InPlaceTable = decltype(kInPlaceTiles<false, Prefetch::kNone>);
template <bool kMasked>
constexpr const InPlaceTable* kInPlaceByPrefetch[4] = {
    &kInPlaceTiles<kMasked, Prefetch::kNone>, &kInPlaceTiles<kMasked, Prefetch::kAhead>,
    &kInPlaceTiles<kMasked, Prefetch::kNextChunk>, &kInPlaceTiles<kMasked, Prefetch::kAheadToL2>};
constexpr const InPlaceTable* const* kInPlace[2] = {kInPlaceByPrefetch<false>, kInPlaceByPrefetch<true>};

// The first row tile over a widened block of a whole tiled group: rows i, i + 1 x the group's 48 columns
// over `pairs` pairs from p0, read in place and widened in registers as InPlaceTile does, each widened
// vector also stored to `block` (WidenTiled's layout) for the block tiles of the rows after. Storing
// them as it goes costs it 12 stores a pair rather than a widening pass of its own over the block.
void WideningTile(const PairProblem& p, int64_t i, int64_t p0, const uint32_t* w, int64_t stride, int64_t pairs,
                  float* block, float* y, bool first, LineWalk walk) {
  const float* x = static_cast<const float*>(p.x) + i * p.ldx + 2 * p0;
  __m256i masks[kGroupVectors];
#pragma GCC unroll 8
  for (int v = 0; v < kGroupVectors; ++v) masks[v] = LaneMask(kLanes);
  __m256 acc[2][kGroupVectors];
  LoadSums(y, p.n, first, false, masks, acc);
  TwoRowGroupPairs<true, Prefetch::kNextChunk>(x, p.ldx, w, stride, pairs, walk, acc, block);
  StoreSums(y, p.n, false, masks, acc);
}

// Row tile t of `tiles` over a chunk of tiled weights: the first reads the chunk from memory,
// prefetching its own stream ahead, and with min_tiles tiles or more the others, which read it from L2,
// bring the next chunk into L2 between them, a share each, a step at a time (inc 0: no walk). The AVX2
// kernel on a 2-core Zen 5 VM, alternating calls: 5-8 rows 4-34 % faster, 8 rows 15 % (216 GFLOP/s, the
// rate with the weights in L2); 2 tiles (3-4 rows), where one tile would ask for 3 lines a step, 5 %
// slower, so min_tiles is 3 there. On a 2-core Emerald Rapids VM 2 tiles walk (min_tiles 2,
// SecondRowTileWalksNextChunk): `bench_matmul --isa=avx2 --decode-only`, 4 rows 60-65 -> 71-76 % of the
// read (3 pairs); asking for every line of the share (3 a step) instead, 60-64 %.
LineWalk NextChunkWalk(const NextBlock& next, int64_t t, int64_t tiles, int64_t min_tiles, int64_t steps) {
  if (t == 0 || tiles < min_tiles || next.rows == 0) return LineWalk{nullptr, 0, 1, 0, 0};
  const int64_t share = (next.bytes + tiles - 2) / (tiles - 1);
  return LineWalk{next.begin + (t - 1) * share, 0, int64_t{1} << 62, 0, std::max<int64_t>(1, (share + steps - 1) / steps)};
}

// Prefill where widening in registers would take FMA slots: each chunk of a group widened once into a
// block (widen_block), then every row tile over it. On a whole tiled group the first two rows' tile
// widens the chunk as it goes (WideningTile); otherwise a pass of its own does, before the tiles.
void WidenedBlockColumns(const PairProblem& p, int64_t i_begin, int64_t i_end, int64_t j_begin, int64_t j_end) {
  const int64_t pairs = Pairs(p);
  const int64_t chunk = EqualPart(pairs, kBlockChunkPairs, kLanes);
  float* block = ThreadScratch<float, Slot::kPackedWeights>(2 * chunk * kTileRows);
  for (int64_t j = j_begin; j < j_end;) {
    const int64_t cols = GroupCols(p, j, j_end);
    const bool widening_tile = p.w_tiled && cols == kTileRows;
    const int64_t i_blocks = widening_tile ? i_begin + kInPlaceRows : i_begin;
    // Row tiles x half groups, and the widening tile.
    const int64_t tiles = 2 * ((i_end - i_blocks + kBlockRows - 1) / kBlockRows) + (widening_tile ? 1 : 0);
    for (int64_t c0 = 0; c0 < pairs; c0 += chunk) {
      const int64_t c1 = std::min(c0 + chunk, pairs);
      const NextBlock next = p.w_tiled ? NextBlockOf(p, j, cols, c1, chunk, j_end) : NextBlock{};
      int64_t t = 0;
      if (widening_tile) {
        int64_t stride = 0;
        const uint32_t* w = TiledPairs(p, j, c0, &stride);
        WideningTile(p, i_begin, c0, w, stride, c1 - c0, block, p.y + i_begin * p.n + j, c0 == 0,
                     TileWalk(next, t++, tiles, c1 - c0, w));
      } else if (p.w_tiled) {
        WidenTiled(p, j, cols, c0, c1, block);
      } else {
        WidenRowMajor(p, j, cols, c0, c1, block);
      }
      for (int64_t i = i_blocks; i < i_end; i += kBlockRows) {
        const BlockTileFn tile = kBlockTiles[std::min<int64_t>(kBlockRows, i_end - i) - 1][0];
        for (int64_t h = 0; h < cols; h += kBlockCols, ++t) {
          tile(p, i, 2 * c0, block + h, 2 * (c1 - c0), p.y + i * p.n + j + h, std::min(kBlockCols, cols - h), c0 == 0,
               TileWalk(next, t, tiles, 2 * (c1 - c0), block));
        }
      }
    }
    j += cols;
  }
}

void PassColumns(const PairProblem& p, int64_t i_begin, int64_t i_end, int64_t j_begin, int64_t j_end) {
  const int64_t pairs = Pairs(p);
  const bool few = i_end - i_begin <= kFewRows;
  if (i_end - i_begin >= kBlockMinRows && p.widen_block) {
    WidenedBlockColumns(p, i_begin, i_end, j_begin, j_end);
    return;
  }
  const int64_t chunk = EqualPart(pairs, p.w_tiled || !few ? kChunkPairs : kFewRowsTransposedChunkPairs, kLanes);
  uint32_t* block = p.w_tiled ? nullptr : ThreadScratch<uint32_t, Slot::kPackedWeights>(chunk * kTileRows);
  const int64_t row_tiles = (i_end - i_begin + kInPlaceRows - 1) / kInPlaceRows;
  const int64_t min_walk_tiles = SecondRowTileWalksNextChunk() ? 2 : 3;
  static const Prefetch ahead = DecodePrefetchesToL2() ? Prefetch::kAheadToL2 : Prefetch::kAhead;
  for (int64_t j = j_begin; j < j_end;) {
    const int64_t cols = GroupCols(p, j, j_end);
    const int vectors = static_cast<int>((cols + kLanes - 1) / kLanes);
    for (int64_t c0 = 0; c0 < pairs; c0 += chunk) {
      const int64_t c1 = std::min(c0 + chunk, pairs);
      const uint32_t* w = block;
      int64_t stride = kTileRows;
      if (p.w_tiled) {
        w = TiledPairs(p, j, c0, &stride);
      } else {
        PairsRowMajor(p, j, cols, c0, c1, block);
      }
      const NextBlock next = p.w_tiled ? NextBlockOf(p, j, cols, c1, chunk, j_end) : NextBlock{};
      for (int64_t i = i_begin, t = 0; i < i_end; i += kInPlaceRows, ++t) {
        const LineWalk walk = NextChunkWalk(next, t, row_tiles, min_walk_tiles, c1 - c0);
        const Prefetch prefetch = !p.w_tiled ? Prefetch::kNone : walk.inc > 0 ? Prefetch::kNextChunk : ahead;
        const InPlaceTable& tiles = *kInPlace[cols % kLanes != 0][static_cast<int>(prefetch)];
        tiles[std::min<int64_t>(kInPlaceRows, i_end - i) - 1][vectors - 1](p, i, c0, w, stride, c1 - c0,
                                                                           p.y + i * p.n + j, cols, c0 == 0, walk);
      }
    }
    j += cols;
  }
}

// Decode of one row on tiled weights: two whole groups at once, [ja, ja + 48) and [jb, jb + 48), over
// the whole of k, as two streams. A core reading one stream with arithmetic between the loads falls
// short of its share of DRAM bandwidth: on a 2-core Zen 5 VM the tied head's decode (1 GB a core) read
// 27-33 GB/s a group at a time and 42-52 two at a time (runs minutes apart); four at a time, half a
// group each in chunks, 36-38. Prefetch distances from 4 to 64 KiB and T1/T2/NTA hints changed nothing
// there; Intel cores prefetch into L2 (PrefetchAhead).
template <bool kToL2>
void GroupPair(const PairProblem& p, int64_t ja, int64_t jb) {
  const uint32_t* w[2] = {reinterpret_cast<const uint32_t*>(p.w + ja * p.k),
                          reinterpret_cast<const uint32_t*>(p.w + jb * p.k)};
  const float* x = static_cast<const float*>(p.x);
  __m256 acc[2][kGroupVectors];
#pragma GCC unroll 2
  for (int s = 0; s < 2; ++s) {
#pragma GCC unroll 8
    for (int v = 0; v < kGroupVectors; ++v) acc[s][v] = _mm256_setzero_ps();
  }
  const int64_t pairs = Pairs(p);
  for (int64_t q = 0; q < pairs; ++q) {
    const __m256 even_x = _mm256_broadcast_ss(x + 2 * q), odd_x = _mm256_broadcast_ss(x + 2 * q + 1);
#pragma GCC unroll 2
    for (int s = 0; s < 2; ++s) {
      PrefetchAhead<kToL2>(w[s]);
#pragma GCC unroll 8
      for (int v = 0; v < kGroupVectors; ++v) {
        const __m256i pairs_v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[s] + v * kLanes));
        acc[s][v] = _mm256_fmadd_ps(even_x, EvenValues(pairs_v), acc[s][v]);
        acc[s][v] = _mm256_fmadd_ps(odd_x, OddValues(pairs_v), acc[s][v]);
      }
      w[s] += kTileRows;
    }
  }
#pragma GCC unroll 2
  for (int s = 0; s < 2; ++s) {
#pragma GCC unroll 8
    for (int v = 0; v < kGroupVectors; ++v) _mm256_storeu_ps(p.y + (s == 0 ? ja : jb) + v * kLanes, acc[s][v]);
  }
}

// Decode of one row on row-major weights: columns j, j + step, .. (`cols` <= 16 of them) over the whole
// of k, as kRowMajorChains vectors of 8, each transposed 8 pairs at a time in registers and fed straight
// to its own chain of fused multiply-adds. Taken from 16 parts of a thread's columns (ForSegmentedTiles),
// the 16 rows continue where the last tile's ended: 16 long streams. On a 2-core Zen 5 VM, alternating
// calls, one row read 37-45 GB/s this way (3 chains: q_proj 44-54, down_proj 30-32; 4 chains 27-32);
// transposed 48 rows x 64 pairs at a time into a block in L1 and read from there, 13-18 GB/s.
constexpr int kRowMajorChains = 2;
void OneRowRowMajor(const PairProblem& p, int64_t j, int64_t step, int64_t cols) {
  const float* x = static_cast<const float*>(p.x);
  int64_t rows[kRowMajorChains];
  __m256 acc[kRowMajorChains];
  for (int s = 0; s < kRowMajorChains; ++s) {
    rows[s] = std::clamp<int64_t>(cols - s * kLanes, 0, kLanes);
    acc[s] = _mm256_setzero_ps();
  }
  const int64_t pairs = Pairs(p);
  for (int64_t pb = 0; pb < pairs; pb += kLanes) {
    const int64_t count = std::min<int64_t>(kLanes, pairs - pb);
#pragma GCC unroll 4
    for (int s = 0; s < kRowMajorChains; ++s) {
      if (rows[s] == 0) continue;
      __m256i r[kLanes];
      LoadPairs8(p, j + s * kLanes * step, rows[s], pb, r, step);
#pragma GCC unroll 8
      for (int64_t q = 0; q < count; ++q) acc[s] = AddPairProducts(acc[s], x + 2 * (pb + q), r[q]);
    }
  }
  alignas(32) float out[kRowMajorChains * kLanes];
  for (int s = 0; s < kRowMajorChains; ++s) _mm256_store_ps(out + s * kLanes, acc[s]);
  for (int64_t c = 0; c < cols; ++c) p.y[j + c * step] = out[c];
}

// Decode of one row on tiled weights: the whole groups two at a time, one from each half of the thread's
// groups (ForSegmentedTiles); a thread's first and last group may be partial (ranges split groups; the
// matrix's last may be short) and go alone.
void OneRowTiled(const PairProblem& p, int64_t j_begin, int64_t j_end) {
  const int64_t full_begin = std::min(RoundUp(j_begin, kTileRows), j_end);
  const int64_t full_end = std::max(full_begin, j_end / kTileRows * kTileRows);
  PassColumns(p, 0, 1, j_begin, full_begin);
  static const auto group_pair = DecodePrefetchesToL2() ? &GroupPair<true> : &GroupPair<false>;
  ForSegmentedTiles(full_begin / kTileRows, full_end / kTileRows, 2, [&p](int64_t g, int64_t step, int64_t groups) {
    if (groups == 2) {
      group_pair(p, g * kTileRows, (g + step) * kTileRows);
    } else {
      PassColumns(p, 0, 1, g * kTileRows, (g + 1) * kTileRows);
    }
  });
  PassColumns(p, 0, 1, full_end, j_end);
}

}  // namespace

void Avx2Columns(const PairProblem& p, int64_t j_begin, int64_t j_end) {
  if (p.m == 1 && p.w_tiled) {
    OneRowTiled(p, j_begin, j_end);
    return;
  }
  if (p.m == 1) {
    ForSegmentedTiles(j_begin, j_end, kRowMajorChains * kLanes,
                      [&p](int64_t j, int64_t step, int64_t cols) { OneRowRowMajor(p, j, step, cols); });
    return;
  }
  // Equal passes, so that no pass is a short one with little reuse of each block; whole tiles of either kind.
  static_assert(kBlockRows % kInPlaceRows == 0);
  ForRowPasses(p.m, p.ldx * static_cast<int64_t>(sizeof(float)), kPassBytes, kPassRows, kBlockRows,
               [&](int64_t i0, int64_t i1) { PassColumns(p, i0, i1, j_begin, j_end); });
}

}  // namespace layerpipe::matmul_internal
