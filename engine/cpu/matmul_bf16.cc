// The bf16 weight format's runners: x prepared for the kernel (bf16 pairs for vdpbf16ps, fp32 rows for
// the column order), the bf16 kernels' problem built from the matrix, columns split among threads.
#include <cstdint>

#include "engine/cpu/matmul_formats.h"
#include "engine/cpu/matmul_kernels.h"

namespace layerpipe::matmul_internal {
namespace {

// Threads receive whole units of columns: one AVX-512 vector of outputs (a thread's range may split a
// group of 48 tiled rows: whole groups left 2 threads 1056 and 992 of k_proj's 2048 columns).
constexpr int64_t kColumnUnit = 16;

using Columns = void (*)(const PairProblem& p, int64_t j_begin, int64_t j_end);

// bf16_x: x as bf16 pairs (the AVX-512 BF16 order); otherwise fp32 rows, rounded to bf16 values if the
// call asks, for the column order.
void Run(const MatmulCall& c, bool bf16_x, Columns columns) {
  const WeightMatrix& w = *c.w;
  PairProblem p{};
  p.x = bf16_x ? static_cast<const void*>(PrepareBf16(c.x, c.m, w.cols, *c.pool, &p.ldx))
               : PrepareF32(c.x, c.m, w.cols, c.x_as_bf16, *c.pool, &p.ldx);
  p.m = c.m;
  p.k = w.cols;
  p.w = w.bf16();
  p.w_tiled = w.tiled();
  p.widen_block = c.widening == MatmulWidening::kBlock;
  p.n = w.rows;
  p.y = c.y;
  ForColumns(c.m, w.cols, w.rows, kColumnUnit, *c.pool, [&p, columns](int64_t j0, int64_t j1) { columns(p, j0, j1); });
}

}  // namespace

void RunBf16Avx2(const MatmulCall& c) { Run(c, /*bf16_x=*/false, Avx2Columns); }
void RunBf16Avx512F(const MatmulCall& c) { Run(c, /*bf16_x=*/false, Avx512FColumns); }
// fp32 mode keeps the column order (vdpbf16ps would round x).
void RunBf16Avx512Bf16(const MatmulCall& c) {
  if (c.x_as_bf16) {
    Run(c, /*bf16_x=*/true, Avx512Bf16Columns);
  } else {
    Run(c, /*bf16_x=*/false, Avx512FColumns);
  }
}

}  // namespace layerpipe::matmul_internal
