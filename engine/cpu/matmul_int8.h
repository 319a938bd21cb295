// The int8 weight format's kernels (the loops: matmul_int8_kernel.h) and their operands.
#ifndef LAYERPIPE_ENGINE_CPU_MATMUL_INT8_H_
#define LAYERPIPE_ENGINE_CPU_MATMUL_INT8_H_

#include <cstdint>

#include "engine/model/weight_matrix.h"

namespace layerpipe::matmul_internal {

// One call's operands, the weights in the int8 tiled order (engine/model/weight_matrix.h: Int8Tiled).
struct Int8Problem {
  const float* x;  // m rows of ldx floats; columns [k, kp) zero
  int64_t ldx;
  int64_t m;
  int64_t kp;      // k padded to a multiple of kQuantGroup
  const int8_t* w;
  const uint16_t* scales;
  int64_t n;
  float* y;        // m rows of n
};

// y[:, j_begin:j_end), j_begin a multiple of kInt8TileRows, in the column order (matmul_int8_kernel.h):
// the same bits on both.
void Int8Avx2Columns(const Int8Problem& p, int64_t j_begin, int64_t j_end);
void Int8Avx512FColumns(const Int8Problem& p, int64_t j_begin, int64_t j_end);

}  // namespace layerpipe::matmul_internal

#endif  // LAYERPIPE_ENGINE_CPU_MATMUL_INT8_H_
