// Software prefetch of the weight block a blocked matmul reads next (matmul_pair_kernel.h): a line per
// step of the present block's arithmetic, so the next block arrives from DRAM in L2 while this one
// computes. Many lines at once cost more than they save: each outstanding line holds a fill buffer that
// the tiles' x loads from L2 also need (a former packing kernel, with 64-row passes, ran its arithmetic
// ~10 % slower at 12 lines per call), and Zen 4+ drops a T1 prefetch that finds no free miss buffer.
#ifndef LAYERPIPE_ENGINE_CPU_MATMUL_PREFETCH_H_
#define LAYERPIPE_ENGINE_CPU_MATMUL_PREFETCH_H_

#include <immintrin.h>

#include <cstdint>

namespace layerpipe::matmul_internal {

// Prefetch into L2 a step at a time, `inc` bytes on each step, over ranges of `bytes`, `stride` apart
// (after the last range it goes on into whatever follows: a prefetch cannot fault).
struct LineWalk {
  const char* row;
  int64_t offset;
  int64_t bytes;
  int64_t stride;
  int64_t inc;
  __attribute__((always_inline)) inline void Step() {
    _mm_prefetch(row + offset, _MM_HINT_T1);
    offset += inc;
    if (offset >= bytes) {
      offset -= bytes;
      row += stride;
    }
  }
};

}  // namespace layerpipe::matmul_internal

#endif  // LAYERPIPE_ENGINE_CPU_MATMUL_PREFETCH_H_
