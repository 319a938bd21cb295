// Prefill attention on tensor cores for a step's long slices (step_plan.h: kGemmAttentionMinRows):
// for each query block, kernels stage its queries (split into bf16 hi and lo halves) and its keys and
// values, cuBLASLt computes the scores and then the probabilities times the values, and a kernel
// scatters the block's rows into the step's attention output. Holds the current step's GEMM slices
// and the scratch its largest block needs; never part of a decode graph, whose slices have one row.
#ifndef LAYERPIPE_ENGINE_CUDA_GEMM_ATTENTION_H_
#define LAYERPIPE_ENGINE_CUDA_GEMM_ATTENTION_H_

#include <cuda_runtime.h>

#include <vector>

#include "absl/status/status.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/host_step.h"
#include "engine/cuda/kernels.h"
#include "engine/model/config.h"

namespace layerpipe::cuda {

class GemmAttention {
 public:
  GemmAttention(const ModelConfig& cfg, Gemm* gemm, cudaStream_t stream) : cfg_(cfg), gemm_(gemm), stream_(stream) {}

  // Takes the step's GEMM slices (HostStep::gemm) once the scratch fits their largest query block.
  absl::Status Prepare(std::vector<GemmSlice> slices);
  // Every GEMM slice's attention in one layer; `p` holds the layer's part (queries, keys, output).
  absl::Status Run(GemmAttentionParams p, bool full);

 private:
  absl::Status RunBlock(const GemmQueryBlock& b, GemmAttentionParams p);

  const ModelConfig& cfg_;
  Gemm* gemm_;
  cudaStream_t stream_;
  std::vector<GemmSlice> slices_;
  DeviceBuffer scratch_;
};

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_GEMM_ATTENTION_H_
