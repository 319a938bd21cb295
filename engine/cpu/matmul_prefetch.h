// Software prefetch of the weight block a blocked matmul packs next. Packing reads each weight once,
// from DRAM, and waited on it; a few lines per tile call, spread over the present block's arithmetic,
// arrive in L2 in time. On a 2-core Xeon VM (Emerald Rapids) packing fell from ~8.5 % to ~4.5 % of a
// 512-row prefill GEMM on the AVX-512F path (matmul_avx512f.cc). Many lines per call cost more than
// they save: each outstanding line holds a fill buffer that the tiles' x loads from L2 also need (with
// 64-row passes, 12 lines per call made the arithmetic ~10 % slower); 256-row passes need ~3. The AVX2
// path (68-row passes at down_proj's k) gained ~5 % from it on a 2-core Zen 5 VM.
#ifndef LAYERPIPE_ENGINE_CPU_MATMUL_PREFETCH_H_
#define LAYERPIPE_ENGINE_CPU_MATMUL_PREFETCH_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "engine/cpu/matmul_kernels.h"

namespace layerpipe::matmul_internal {

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
    row_ = static_cast<const char*>(p.w) + (j * p.k + q_begin) * elem;
    row_bytes_ = p.k * elem;
    lines_per_row_ = ((q_end - q_begin) * elem + 63) / 64;
    rows_left_ = lines_per_row_ > 0 ? cols : 0;
    per_call_ = calls > 0 ? (cols * lines_per_row_ + calls - 1) / calls : 0;
  }

  void Step() {
    for (int64_t e = 0; e < per_call_ && rows_left_ > 0; ++e) {
      _mm_prefetch(row_ + line_ * 64, _MM_HINT_T1);
      if (++line_ == lines_per_row_) {
        line_ = 0;
        row_ += row_bytes_;
        --rows_left_;
      }
    }
  }

 private:
  const char* row_;
  int64_t row_bytes_ = 0, lines_per_row_ = 0, rows_left_ = 0, per_call_ = 0, line_ = 0;
};

}  // namespace layerpipe::matmul_internal

#endif  // LAYERPIPE_ENGINE_CPU_MATMUL_PREFETCH_H_
