// The seam between the matmul front end (matmul.cc: ISA choice, the (format × ISA) table) and each
// weight format's kernels. A format gives one runner per ISA: it brings x into its kernels' layout
// with the shared preparation below and splits the output columns among the threads (ForColumns),
// so every (row, column) result stays on one thread with one reduction order.
#ifndef LAYERPIPE_ENGINE_CPU_MATMUL_FORMATS_H_
#define LAYERPIPE_ENGINE_CPU_MATMUL_FORMATS_H_

#include <cstdint>
#include <functional>

#include "engine/cpu/matmul.h"
#include "engine/cpu/thread_pool.h"
#include "engine/model/weight_matrix.h"

namespace layerpipe::matmul_internal {

// One call of Matmul, its shape trivial cases handled and its ISA one this CPU runs.
struct MatmulCall {
  const float* x;
  int64_t m;
  const WeightMatrix* w;  // [n, k] = [w->rows, w->cols]
  float* y;
  ThreadPool* pool;
  bool x_as_bf16;
  MatmulWidening widening;
};
using FormatRunner = void (*)(const MatmulCall& call);

// The bf16 format (matmul_bf16.cc; kernels matmul_avx2.cc, matmul_avx512f.cc, matmul_avx512.cc).
void RunBf16Avx2(const MatmulCall& call);
void RunBf16Avx512F(const MatmulCall& call);
void RunBf16Avx512Bf16(const MatmulCall& call);

// The quantized formats, int8 and int4 (matmul_packed.cc; kernels matmul_packed_avx2.cc,
// matmul_packed_avx512f.cc).
void RunInt8Avx2(const MatmulCall& call);
void RunInt8Avx512F(const MatmulCall& call);
void RunInt4Avx2(const MatmulCall& call);
void RunInt4Avx512F(const MatmulCall& call);

// Shared by the formats (matmul_prepare.cc).
// Activations as fp32 rows (rounded to bf16 values if asked), zero-padded to a multiple of kPairXPad, in
// the calling thread's scratch; *ldx receives the padded width.
const float* PrepareF32(const float* x, int64_t m, int64_t k, bool round_to_bf16, ThreadPool& pool, int64_t* ldx);
// Activations as bf16 rows zero-padded to a multiple of kPairXPad (the AVX-512 BF16 kernel's x).
const uint16_t* PrepareBf16(const float* x, int64_t m, int64_t k, ThreadPool& pool, int64_t* ldx);
// columns(j0, j1) over [0, n) in whole units of `unit` columns, on the pool's threads unless the call
// is too small to be worth waking them.
void ForColumns(int64_t m, int64_t k, int64_t n, int64_t unit, ThreadPool& pool,
                const std::function<void(int64_t, int64_t)>& columns);

}  // namespace layerpipe::matmul_internal

#endif  // LAYERPIPE_ENGINE_CPU_MATMUL_FORMATS_H_
