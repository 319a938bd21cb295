// Internal interface between the matmul front end (matmul.cc: dispatch, activation preparation,
// threading) and the per-ISA kernels (matmul_avx2.cc, matmul_avx512.cc). Each kernel computes a range
// of output columns for all rows; the front end gives every thread a disjoint column range.
#ifndef LAYERPIPE_ENGINE_CPU_MATMUL_KERNELS_H_
#define LAYERPIPE_ENGINE_CPU_MATMUL_KERNELS_H_

#include <cstdint>

#include "engine/cpu/thread_scratch.h"

namespace layerpipe::matmul_internal {

constexpr int64_t RoundUp(int64_t v, int64_t multiple) { return (v + multiple - 1) / multiple * multiple; }
// The length of each of the fewest equal parts of `total` that are at most `most` long, rounded up to
// a multiple of `multiple` (the last part takes what is left).
constexpr int64_t EqualPart(int64_t total, int64_t most, int64_t multiple) {
  const int64_t parts = (total + most - 1) / most;
  return RoundUp((total + parts - 1) / parts, multiple);
}

// The kernels' per-thread scratch buffers (thread_scratch.h), one per use.
enum class Slot { kActivations, kPackedWeights, kPartialSums };
using layerpipe::ThreadScratch;

// How far ahead the AVX2-order kernels prefetch each weight row they stream from memory. At 512 bytes
// decode read 10-30 % fewer GB/s on a 2-core Zen 5 VM (most on down_proj's long rows; m = 8 is
// arithmetic-bound either way).
constexpr int64_t kRowPrefetchBytes = 2048;

// AVX2 reduction order: lane l of an 8-float accumulator sums x[i,q]·w[j,q] for q ≡ l (mod 8) in
// increasing q, one fused multiply-add each; the lanes are then added in a fixed tree.
constexpr int64_t kAvx2KStep = 8;

struct Avx2Problem {
  const float* x;      // m rows of ldx floats; columns [k, RoundUp(k, 8)) must be zero
  int64_t ldx;
  int64_t m;
  int64_t k;
  const void* w;       // n rows of k values, bf16 bits or fp32
  bool w_is_bf16;
  int64_t n;
  float* y;            // m rows of n floats
  bool wide;           // long chunks on AVX-512F registers (matmul_avx512f.cc): same bits, CPU must have it
};

// Computes y[:, j_begin:j_end).
void Avx2Columns(const Avx2Problem& p, int64_t j_begin, int64_t j_end);
// Packs weight columns j, j + step, .. (`cols` of them) over k values [q0, q0 + len) (len a multiple of 8)
// as fp32: for each step of 8 values, `stride` vectors of 8 back to back (column c at c * 8). Columns
// from cols to stride and values past k are zero, matching x's zero padding.
void PackColumns(const Avx2Problem& p, int64_t j, int64_t cols, int64_t stride, int64_t q0, int64_t len, float* out,
                 int64_t step = 1);

// Decode and short chunks read weights in place, a tile's columns one weight row each. Taken from
// `segments` equal parts of a thread's columns (the t-th tile reads row t of each part), a tile's rows
// continue where the previous tile's ended: that many long sequential streams instead of the same
// number of short ones restarting at every tile, which the hardware prefetchers follow much better.
// On a 2-core Zen 5 VM, m = 1, against a plain read of the same bytes: AVX2 kernel 59-87 % tile by tile,
// 85-104 % segmented (42-61 -> 76-85 GB/s); its AVX-512F form 64-87 % -> 79-99 %. Calls
// tile(j, step, cols) for every tile of columns j, j + step, .. (cols of them); the columns past the
// whole parts go in tiles of adjacent ones.
template <typename TileFn>
void ForSegmentedTiles(int64_t j_begin, int64_t j_end, int segments, TileFn&& tile) {
  const int64_t part = (j_end - j_begin) / segments;
  for (int64_t t = 0; t < part; ++t) tile(j_begin + t, part, segments);
  for (int64_t j = j_begin + part * segments; j < j_end; j += segments) tile(j, 1, std::min<int64_t>(segments, j_end - j));
}
// The blocked and streaming paths of Avx2Columns on AVX-512F registers, bit for bit the same. Only call
// when the CPU supports AVX-512F.
void Avx512FBlockedColumns(const Avx2Problem& p, int64_t j_begin, int64_t j_end);
void Avx512FStreamColumns(const Avx2Problem& p, int64_t j_begin, int64_t j_end);

// AVX-512 BF16 order: output (i, j) is one fp32 lane's chain over the pairs of k in increasing order,
// acc = vdpbf16ps(acc, x[i][2p, 2p + 1], w[j][2p, 2p + 1]) from +0, with no sum across lanes; an odd
// k's last pair is (value, 0). x rows are padded with zeros to a multiple of kAvx512XPad values.
constexpr int64_t kAvx512XPad = 32;

struct Avx512Bf16Problem {
  const uint16_t* x;   // m rows of ldx bf16 values; columns [k, RoundUp(k, kAvx512XPad)) must be zero
  int64_t ldx;
  int64_t m;
  int64_t k;
  const uint16_t* w;   // n rows of k bf16 values, row-major or tiled
  bool w_tiled;        // engine/model/tiled_rows.h; then k is even
  int64_t n;
  float* y;
};

// Computes y[:, j_begin:j_end). Only call when the CPU supports AVX-512 BF16.
void Avx512Bf16Columns(const Avx512Bf16Problem& p, int64_t j_begin, int64_t j_end);

}  // namespace layerpipe::matmul_internal

#endif  // LAYERPIPE_ENGINE_CPU_MATMUL_KERNELS_H_
