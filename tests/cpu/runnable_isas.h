// The matmul kernels this machine can run, for tests that hold every one of them to the same bits.
#ifndef LAYERPIPE_TESTS_CPU_RUNNABLE_ISAS_H_
#define LAYERPIPE_TESTS_CPU_RUNNABLE_ISAS_H_

#include <vector>

#include "engine/cpu/matmul.h"

namespace layerpipe {

inline std::vector<MatmulIsa> RunnableIsas() {
  std::vector<MatmulIsa> isas = {MatmulIsa::kAvx2};
  if (CpuSupportsAvx512F()) isas.push_back(MatmulIsa::kAvx512F);
  if (CpuSupportsAvx512Bf16()) isas.push_back(MatmulIsa::kAvx512Bf16);
  return isas;
}

}  // namespace layerpipe

#endif  // LAYERPIPE_TESTS_CPU_RUNNABLE_ISAS_H_
