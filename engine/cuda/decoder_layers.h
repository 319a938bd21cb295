// One step's pass through the stage's decoder layers: each layer's part of the CPU forward pass
// (engine/cpu/cpu_backend.cc) as kernels and cuBLASLt GEMMs on the step scratch, with positions, tiles,
// rotary tables and cache pointers read from the step's uploaded metadata. It only enqueues work on
// the backend's stream, and a decode step's launches depend on nothing but the step's shape and the
// scratch addresses, so the whole pass can be captured into a decode graph and replayed.
#ifndef LAYERPIPE_ENGINE_CUDA_DECODER_LAYERS_H_
#define LAYERPIPE_ENGINE_CUDA_DECODER_LAYERS_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/gemm_attention.h"
#include "engine/cuda/host_step.h"
#include "engine/cuda/step_scratch.h"
#include "engine/model/config.h"

namespace layerpipe::cuda {

class DecoderLayers {
 public:
  // Layers [layer_begin, layer_end) of `dw`; `bf16`: the bf16 precision mode.
  DecoderLayers(const ModelConfig& cfg, const DeviceWeights& dw, int layer_begin, int layer_end, bool bf16,
                const StepPlanner& planner, const StepScratch& scratch, Gemm* gemm, GemmAttention* gemm_attention,
                cudaStream_t stream)
      : cfg_(cfg),
        dw_(dw),
        layer_begin_(layer_begin),
        layer_end_(layer_end),
        bf16_(bf16),
        planner_(planner),
        scratch_(scratch),
        gemm_(gemm),
        gemm_attention_(gemm_attention),
        stream_(stream) {}

  // The step's hidden rows (scratch h) through every layer, in place.
  absl::Status Run(const StepShape& shape);

 private:
  absl::Status RunLayer(int l, const StepShape& shape);

  const ModelConfig& cfg_;
  const DeviceWeights& dw_;
  int layer_begin_, layer_end_;
  bool bf16_;
  const StepPlanner& planner_;
  const StepScratch& scratch_;
  Gemm* gemm_;
  GemmAttention* gemm_attention_;
  cudaStream_t stream_;
};

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_DECODER_LAYERS_H_
