// The quantized formats' kernels (int8, int4) (the loops: matmul_packed_kernel.h) and their operands.
#ifndef LAYERPIPE_ENGINE_CPU_MATMUL_PACKED_H_
#define LAYERPIPE_ENGINE_CPU_MATMUL_PACKED_H_

#include <cstdint>

#include "engine/model/weight_matrix.h"

namespace layerpipe::matmul_internal {

// One call's operands, the weights in the quantized tiled order (engine/model/weight_matrix.h: PackedTiled).
struct PackedProblem {
  const float* x;  // m rows of ldx floats; columns [k, kp) zero
  int64_t ldx;
  int64_t m;
  int64_t kp;      // k padded to a multiple of kQuantGroup
  const int8_t* w;
  const uint16_t* scales;
  int64_t n;
  float* y;        // m rows of n
};

// y[:, j_begin:j_end), j_begin a multiple of kPackedTileRows, in the column order (matmul_packed_kernel.h):
// the same bits on both.
void Int8Avx2Columns(const PackedProblem& p, int64_t j_begin, int64_t j_end);
void Int8Avx512FColumns(const PackedProblem& p, int64_t j_begin, int64_t j_end);
void Int4Avx2Columns(const PackedProblem& p, int64_t j_begin, int64_t j_end);
void Int4Avx512FColumns(const PackedProblem& p, int64_t j_begin, int64_t j_end);

}  // namespace layerpipe::matmul_internal

#endif  // LAYERPIPE_ENGINE_CPU_MATMUL_PACKED_H_
