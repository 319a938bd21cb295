// Software prefetch of the weight block a blocked matmul packs next. Packing reads each weight once,
// from DRAM, and waited on it; a few lines per tile call, spread over the present block's arithmetic,
// arrive in L2 in time. On a 2-core Xeon VM (Emerald Rapids) packing fell from ~8.5 % to ~4.5 % of a
// 512-row prefill GEMM on the AVX-512F path (matmul_avx512f.cc). Many lines per call cost more than
// they save: each outstanding line holds a fill buffer that the tiles' x loads from L2 also need (with
// 64-row passes, 12 lines per call made the arithmetic ~10 % slower); 256-row passes need ~3. The AVX2
// path (68-row passes at down_proj's k) gained ~5 % from it on a 2-core Zen 5 VM. The AVX-512 BF16
// kernel, which reads its blocks in place, walks the next block a line per step of its tiles instead
// (LineWalk, shared).
#ifndef LAYERPIPE_ENGINE_CPU_MATMUL_PREFETCH_H_
#define LAYERPIPE_ENGINE_CPU_MATMUL_PREFETCH_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "engine/cpu/matmul_kernels.h"

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

class NextBlockPrefetch {
 public:
  // The present block is columns [jc, jc + block_cols) x k values [q0, q0 + block_k) of a thread's
  // columns [.., j_end); the next is the following k block, or after the last the next column block
  // from k = 0. Its lines are spread over `calls` calls of Step.
  NextBlockPrefetch(const Avx2Problem& p, int64_t jc, int64_t j_end, int64_t block_cols, int64_t q0,
                    int64_t block_k, int64_t calls) {
    const bool k_ends = q0 + block_k >= p.k;
    const int64_t j = k_ends ? jc + block_cols : jc;
    const int64_t q_begin = k_ends ? 0 : q0 + block_k, q_end = std::min(q_begin + block_k, p.k);
    const int64_t cols = std::clamp<int64_t>(j_end - j, 0, block_cols);
    const int64_t elem = p.w_is_bf16 ? 2 : 4;
    const int64_t lines_per_row = ((q_end - q_begin) * elem + 63) / 64;
    walk_ = LineWalk{static_cast<const char*>(p.w) + (j * p.k + q_begin) * elem, 0, lines_per_row * 64, p.k * elem,
                     64};
    lines_left_ = cols * lines_per_row;
    per_call_ = calls > 0 ? (lines_left_ + calls - 1) / calls : 0;
  }

  void Step() {
    for (int64_t e = 0; e < per_call_ && lines_left_ > 0; ++e, --lines_left_) walk_.Step();
  }

 private:
  LineWalk walk_;
  int64_t lines_left_ = 0, per_call_ = 0;
};

}  // namespace layerpipe::matmul_internal

#endif  // LAYERPIPE_ENGINE_CPU_MATMUL_PREFETCH_H_
