// The quantized formats' runners (int8, int4): x as fp32 rows (rounded to bf16 values in bf16 mode), padded with
// zeros to the weights' padded k, columns split among threads in whole row groups.
#include "engine/cpu/matmul_packed.h"

#include <cstdint>

#include "engine/cpu/matmul_formats.h"
#include "engine/cpu/matmul_kernels.h"

namespace layerpipe::matmul_internal {
namespace {

// PrepareF32 pads x to the width the tiled weights are padded to.
static_assert(kPairXPad == kQuantGroup);

using Columns = void (*)(const PackedProblem& p, int64_t j_begin, int64_t j_end);

void Run(const MatmulCall& c, Columns columns) {
  const WeightMatrix& w = *c.w;
  const PackedTiled t = PackedTiled::Of(w.rows, w.cols, WeightValueBits(w.format));
  PackedProblem p{};
  p.x = PrepareF32(c.x, c.m, w.cols, c.x_as_bf16, *c.pool, &p.ldx);
  p.m = c.m;
  p.kp = t.k_padded;
  p.w = w.int8();
  p.scales = w.scales;
  p.n = w.rows;
  p.y = c.y;
  ForColumns(c.m, w.cols, w.rows, kPackedTileRows, *c.pool, [&p, columns](int64_t j0, int64_t j1) { columns(p, j0, j1); });
}

}  // namespace

void RunInt8Avx2(const MatmulCall& c) { Run(c, Int8Avx2Columns); }
void RunInt4Avx2(const MatmulCall& c) { Run(c, Int4Avx2Columns); }
// AVX-512 BF16 machines run the same fp32 column order: quantized weights gain nothing from vdpbf16ps.
void RunInt8Avx512F(const MatmulCall& c) { Run(c, Int8Avx512FColumns); }
void RunInt4Avx512F(const MatmulCall& c) { Run(c, Int4Avx512FColumns); }

}  // namespace layerpipe::matmul_internal
