// The AVX2 kernel on 512-bit registers, for CPUs with AVX-512F but without AVX-512 BF16 (Skylake-SP to
// Ice Lake servers, VMs that hide BF16): each register holds the 8 lanes of two output columns side by
// side and x's 8 values are broadcast to both halves, so every lane runs exactly the fused multiply-adds
// of kAvx2KStep in the same order and the halves are summed with the AVX2 tree. The bits are the AVX2
// kernel's; only the FMA width doubles. Two paths, as there:
//  - streaming (decode batches, short chunks): weights read in place and widened in registers;
//  - blocked (long chunks): weight blocks packed once and reused by every row tile.
//
// Everything that executes AVX-512 instructions carries LP_AVX512F; the front end calls in here only
// after checking the CPU.
#include <immintrin.h>
#include <unistd.h>

#include <algorithm>

#include "engine/cpu/avx512_pairs.h"
#include "engine/cpu/matmul_kernels.h"
#include "engine/cpu/matmul_prefetch.h"
#include "engine/cpu/tile_table.h"
#include "engine/model/bf16.h"

namespace layerpipe::matmul_internal {
namespace {

using avx512_pairs::BroadcastHalves;
using avx512_pairs::LoadPair;
using avx512_pairs::StorePairSums;

// Micro-tile: kRows rows x kPairs column pairs -> 24 accumulators + 6 weight vectors + 1 x vector of
// the 32 zmm registers; 10 loads per 24 FMAs.
constexpr int kRows = 4;
constexpr int kPairs = 6;
constexpr int kCols = 2 * kPairs;
// Streaming tile (decode batches, short chunks): up to kStreamRows rows, so a batch of 8 widens each
// weight once; 24 accumulators + 3 weight vectors + 1 x vector.
constexpr int kStreamRows = 8;
constexpr int kStreamPairs = 3;
constexpr int kStreamCols = 2 * kStreamPairs;
// kBlockCols weight columns x kBlockK values of k are packed (fp32, 96 KiB) per block, and each packed
// tile (kCols columns, 24 KiB) stays in L1 while all row tiles pass it, x coming from L2: the weights
// are the wider operand (kPairs 64-byte loads a step against kRows 32-byte ones). kBlockK 256 and row
// passes of 128 measured ~5 % slower on a Xeon (Emerald Rapids VM, 48 KiB L1, 2 MiB L2).
constexpr int64_t kBlockCols = 48;
constexpr int64_t kBlockK = 512;
static_assert(kBlockCols % kCols == 0 && kBlockCols % 2 == 0);
// Rows per pass, so that a k block of their x (2 KiB a row) and their parked sums (1.5 KiB a row) stay
// in L2 beside the packed block: 256 rows where the L2 has 2 MiB (Sapphire/Emerald Rapids; 128 measured
// ~5 % slower on an Emerald Rapids VM), 128 where it has less (Skylake-SP to Ice Lake, Zen 4/5, and
// where the CPU does not say). On a 2-core Zen 5 VM (1 MiB), alternating calls, 128 rows ran down_proj
// 6-13 % faster than 256 (30 k blocks, each parking sums) and the k = 3840 shapes as fast.
int64_t BlockRows() {
  static const int64_t rows = sysconf(_SC_LEVEL2_CACHE_SIZE) >= (int64_t{2} << 20) ? 256 : 128;
  return rows;
}

// Weight sources: Load(c, q) is pair c's two columns at k values [q, q + 8), side by side.
// Packed (PackColumns' layout with a stride of kCols), cache-resident by construction.
struct PackedPairs {
  static constexpr bool kPrefetch = false;
  const float* tile;
  LP_AVX512F __m512 Load(int c, int64_t q) const { return _mm512_load_ps(tile + q * kCols + c * 2 * kAvx2KStep); }
  void Prefetch(int, int64_t) const {}
};
// In place (short chunks and decode batches): rows of W, widened in registers and prefetched, as the
// AVX2 kernel's streaming path reads them. A pair's missing second column reads the first again.
template <typename T>
struct InPlacePairs {
  static constexpr bool kPrefetch = true;
  const T* lo[kPairs];
  const T* hi[kPairs];
  LP_AVX512F __m512 Load(int c, int64_t q) const { return LoadPair(lo[c] + q, hi[c] + q); }
  void Prefetch(int c, int64_t q) const {
    _mm_prefetch(reinterpret_cast<const char*>(lo[c] + q) + kRowPrefetchBytes, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(hi[c] + q) + kRowPrefetchBytes, _MM_HINT_T0);
  }
};

// acc[r][c] += x[r][q..] * w[c][q..] over q in [q_begin, q_end) (multiples of 8), in increasing q; x's
// column for the source's q is x_q_offset + q.
template <int R, int P, typename W>
LP_AVX512F inline void Accumulate(const float* x, int64_t ldx, int64_t x_q_offset, const W& w, int64_t q_begin,
                                  int64_t q_end, __m512 (&acc)[R][P]) {
  for (int64_t q = q_begin; q < q_end; q += kAvx2KStep) {
    if constexpr (W::kPrefetch) {
      if ((q & 31) == 0) {  // one prefetch per column per 64 bytes of bf16
#pragma GCC unroll 8
        for (int c = 0; c < P; ++c) w.Prefetch(c, q);
      }
    }
    __m512 wv[P];
#pragma GCC unroll 8
    for (int c = 0; c < P; ++c) wv[c] = w.Load(c, q);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 xv = BroadcastHalves(x + r * ldx + x_q_offset + q);
#pragma GCC unroll 8
      for (int c = 0; c < P; ++c) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
}

// y's first `cols` columns of the tile (row stride ldy) from the accumulators.
template <int R, int P>
LP_AVX512F inline void StoreSums(const __m512 (&acc)[R][P], float* y, int64_t ldy, int64_t cols) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) StorePairSums(acc[r], static_cast<int>(cols), y + r * ldy);
}

// A tile's partial sums between k blocks: one vector per (row, pair), kParkFloats in a row. Each tile's
// are contiguous, and the tiles' follow each other in the order the tiles run: one stream. Laid out as
// the columns of y (rows kBlockCols apart), the prefetched lines still missed L1 often enough that 512-row
// GEMMs ran 3-15 % faster this way on a 2-core Zen 5 VM (two runs; 64 rows 2-5 %), alternating calls.
constexpr int64_t kParkFloats = kRows * kPairs * 2 * kAvx2KStep;
LP_AVX512F inline float* ParkOf(float* park, int r, int c) { return park + (r * kPairs + c) * 2 * kAvx2KStep; }

// One R x (2P) tile over one k block of len values: x rows from x (stride ldx), packed weights from
// `tile`. Partial sums live in `park` (kParkFloats) between k blocks; the block that ends k writes the
// first `cols` columns of y.
template <int R, int P>
LP_AVX512F void Tile(const float* x, int64_t ldx, const float* tile, int64_t len, float* park, bool first,
                     bool last, float* y, int64_t ldy, int64_t cols) {
  __m512 acc[R][P];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < P; ++c) {
      acc[r][c] = first ? _mm512_setzero_ps() : _mm512_load_ps(ParkOf(park, r, c));
    }
  }
  Accumulate(x, ldx, 0, PackedPairs{tile}, 0, len, acc);
  if (last) {
    StoreSums(acc, y, ldy, cols);
    return;
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < P; ++c) _mm512_store_ps(ParkOf(park, r, c), acc[r][c]);
  }
}

// Streaming: rows [i, i + R) x columns j, j + step, .. (cols of them) over the whole k, weights read in
// place; the ragged end of k goes through a packed copy, zero past k like x.
template <int R, int P, typename T>
LP_AVX512F void StreamTileOf(const Avx2Problem& p, int64_t i, int64_t j, int64_t cols, int64_t step) {
  const T* w = static_cast<const T*>(p.w);
  InPlacePairs<T> src;
  for (int c = 0; c < P; ++c) {
    src.lo[c] = w + (j + 2 * c * step) * p.k;
    src.hi[c] = 2 * c + 1 < cols ? src.lo[c] + step * p.k : src.lo[c];
  }
  __m512 acc[R][P];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < P; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const float* x = p.x + i * p.ldx;
  const int64_t k_full = p.k / kAvx2KStep * kAvx2KStep;
  Accumulate(x, p.ldx, 0, src, 0, k_full, acc);
  if (k_full < p.k) {
    alignas(64) float packed[kAvx2KStep * kCols];
    PackColumns(p, j, cols, kCols, k_full, kAvx2KStep, packed, step);
    Accumulate(x, p.ldx, k_full, PackedPairs{packed}, 0, kAvx2KStep, acc);
  }
  float* y = p.y + i * p.n + j;
  if (step == 1) {
    StoreSums(acc, y, p.n, cols);
    return;
  }
  alignas(64) float sums[R][16];
  StoreSums(acc, &sums[0][0], 16, cols);
  for (int r = 0; r < R; ++r) {
    for (int64_t c = 0; c < cols; ++c) y[r * p.n + c * step] = sums[r][c];
  }
}

template <int R, int P>
void StreamTile(const Avx2Problem& p, int64_t i, int64_t j, int64_t cols, int64_t step) {
  if (p.w_is_bf16) {
    StreamTileOf<R, P, uint16_t>(p, i, j, cols, step);
  } else {
    StreamTileOf<R, P, float>(p, i, j, cols, step);
  }
}

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, float*, bool, bool, float*, int64_t, int64_t);
using StreamFn = void (*)(const Avx2Problem&, int64_t, int64_t, int64_t, int64_t);

template <int R, int P>
struct TileEntry {
  static constexpr TileFn kFn = &Tile<R, P>;
};
template <int R, int P>
struct StreamEntry {
  static constexpr StreamFn kFn = &StreamTile<R, P>;
};
// [rows - 1][pairs - 1]
constexpr auto kTiles = TileTable<TileEntry, kRows, kPairs>();
constexpr auto kStreamTiles = TileTable<StreamEntry, kStreamRows, kStreamPairs>();

// PackColumns' layout with a stride of kCols, written a pair of columns (one 64-byte line) at a time in
// the order the tiles read it; the scattered 32-byte stores of the generic packer cost several times more.
template <typename T>
LP_AVX512F void PackPairsOf(const Avx2Problem& p, int64_t j, int64_t cols, int64_t q0, int64_t len, float* out) {
  const T* w = static_cast<const T*>(p.w);
  const T* lo[kPairs];
  const T* hi[kPairs];
  __mmask16 keep[kPairs];
  for (int c = 0; c < kPairs; ++c) {
    lo[c] = w + (j + std::min<int64_t>(2 * c, cols - 1)) * p.k;
    hi[c] = 2 * c + 1 < cols ? lo[c] + p.k : lo[c];
    keep[c] = 2 * c >= cols ? 0 : 2 * c + 1 < cols ? 0xFFFF : 0x00FF;
  }
  for (int64_t q = q0; q < q0 + len; q += kAvx2KStep, out += kCols * kAvx2KStep) {
#pragma GCC unroll 8
    for (int c = 0; c < kPairs; ++c) {
      _mm512_store_ps(out + c * 2 * kAvx2KStep, _mm512_maskz_mov_ps(keep[c], LoadPair(lo[c] + q, hi[c] + q)));
    }
  }
}

void PackPairs(const Avx2Problem& p, int64_t j, int64_t cols, int64_t q0, int64_t len, float* out) {
  if (q0 + len > p.k / kAvx2KStep * kAvx2KStep) {  // ragged end of k: the generic packer's zero padding
    PackColumns(p, j, cols, kCols, q0, len, out);
  } else if (p.w_is_bf16) {
    PackPairsOf<uint16_t>(p, j, cols, q0, len, out);
  } else {
    PackPairsOf<float>(p, j, cols, q0, len, out);
  }
}

// A tile's parked sums into L1. Asked for one tile ahead, they arrive while the present tile computes;
// loaded on demand at the start of each tile, the 24 lines from L2 stalled it: prefetched, 256-512-row
// GEMMs ran 5-7 % faster (k = 3840) and 3-5 % (down_proj) on a 2-core Zen 5 VM, alternating calls.
inline void PrefetchParked(const float* park) {
#pragma GCC unroll 8
  for (int64_t line = 0; line < kParkFloats; line += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(park + line), _MM_HINT_T0);
  }
}

void BlockedRows(const Avx2Problem& p, int64_t i_begin, int64_t i_end, int64_t j_begin, int64_t j_end) {
  const int64_t kp = RoundUp(p.k, kAvx2KStep);
  float* packed = ThreadScratch<float, Slot::kPackedWeights>(kBlockCols * std::min(kBlockK, kp));
  const int64_t row_tiles = (i_end - i_begin + kRows - 1) / kRows;
  float* park = kp > kBlockK ? ThreadScratch<float, Slot::kPartialSums>(row_tiles * (kBlockCols / kCols) * kParkFloats)
                             : nullptr;
  // The tile at rows [i, i + kRows) and columns [t, t + kCols) of a block parks here: column tile by
  // column tile, row tiles in order, as the tiles run.
  auto park_of = [&](int64_t t, int64_t i) {
    return park + (t / kCols * row_tiles + (i - i_begin) / kRows) * kParkFloats;
  };
  for (int64_t jc = j_begin; jc < j_end; jc += kBlockCols) {
    const int64_t nc = std::min(kBlockCols, j_end - jc);
    for (int64_t q0 = 0; q0 < kp; q0 += kBlockK) {
      const int64_t len = std::min(kBlockK, kp - q0);
      const bool first = q0 == 0, last = q0 + len >= kp;
      // The tile of columns [t, t + kCols) is packed at packed + t * len.
      for (int64_t t = 0; t < nc; t += kCols) PackPairs(p, jc + t, std::min<int64_t>(kCols, nc - t), q0, len, packed + t * len);
      const int64_t tile_calls = (nc + kCols - 1) / kCols * row_tiles;
      NextBlockPrefetch prefetch(p, jc, j_end, kBlockCols, q0, kBlockK, tile_calls);
      for (int64_t t = 0; t < nc; t += kCols) {
        const int64_t cols = std::min<int64_t>(kCols, nc - t);
        for (int64_t i = i_begin; i < i_end; i += kRows) {
          const int64_t rows = std::min<int64_t>(kRows, i_end - i);
          prefetch.Step();
          if (park != nullptr && !first && i + kRows < i_end) PrefetchParked(park_of(t, i + kRows));
          kTiles[rows - 1][(cols + 1) / 2 - 1](p.x + i * p.ldx + q0, p.ldx, packed + t * len, len,
                                                park != nullptr ? park_of(t, i) : nullptr, first, last,
                                                p.y + i * p.n + jc + t, p.n, cols);
        }
      }
    }
  }
}

}  // namespace

void Avx512FBlockedColumns(const Avx2Problem& p, int64_t j_begin, int64_t j_end) {
  const int64_t rows = BlockRows();
  for (int64_t i = 0; i < p.m; i += rows) BlockedRows(p, i, std::min(p.m, i + rows), j_begin, j_end);
}

void Avx512FStreamColumns(const Avx2Problem& p, int64_t j_begin, int64_t j_end) {
  ForSegmentedTiles(j_begin, j_end, kStreamCols, [&p](int64_t j, int64_t step, int64_t cols) {
    for (int64_t i = 0; i < p.m; i += kStreamRows) {
      kStreamTiles[std::min<int64_t>(kStreamRows, p.m - i) - 1][(cols + 1) / 2 - 1](p, i, j, cols, step);
    }
  });
}

}  // namespace layerpipe::matmul_internal
