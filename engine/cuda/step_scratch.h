// The device memory a step's layers work in — the activations of every row, attention's split
// partials and the step's metadata buffer with its pinned staging copy — and how it is sized: for the
// largest step so far, rows doubling, so that steady decoding allocates nothing. Captured decode
// graphs hold these addresses, so whenever a buffer moves the graphs are cleared here.
#ifndef LAYERPIPE_ENGINE_CUDA_STEP_SCRATCH_H_
#define LAYERPIPE_ENGINE_CUDA_STEP_SCRATCH_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "engine/cuda/decode_graphs.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/host_step.h"
#include "engine/model/config.h"
#include "engine/model/precision.h"

namespace layerpipe::cuda {

struct StepBuffers {
  // Per row: fp32 hidden rows, matmul inputs in the activation precision, fp32 matmul outputs, and
  // the new keys and values in the KV precision.
  DeviceBuffer h, x, qkv, k_new, v_new, attn, o, gu, act;
  DeviceBuffer part_acc, part_ml;  // attention's split partials (kernels.h: AttentionParams)
  DeviceBuffer meta;               // the step's metadata, as step_plan.h's StepLayout places it
};

class StepScratch {
 public:
  // `graphs`: the decode graphs that capture these buffers.
  StepScratch(const ModelConfig& cfg, int layer_begin, int layer_end, Precision precision, DecodeGraphs* graphs);

  absl::Status Ensure(const StepShape& shape);

  const StepBuffers& buffers() const { return b_; }
  uint8_t* meta_host() const { return meta_host_.get(); }

 private:
  const ModelConfig& cfg_;
  size_t act_bytes_;
  size_t kv_elem_;
  int64_t max_qw_ = 0, max_kw_ = 0, max_qkv_ = 0;  // widest query, key and stacked QKV rows of the range
  DecodeGraphs* graphs_;
  int64_t cap_rows_ = 0;
  StepBuffers b_;
  PinnedBuffer meta_host_;
};

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_STEP_SCRATCH_H_
