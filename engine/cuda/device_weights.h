// The weights of a layer range copied to the device once. Matrices are bf16 in the bf16 mode; the fp32
// mode keeps fp32 copies instead (exact widenings of the bf16 values), so its matmuls run in true fp32
// through cuBLASLt — twice the memory, which only exactness runs pay. Q/K/V are stacked into one
// matrix and gate/up into another, so each becomes a single GEMM (row results are unchanged).
#ifndef LAYERPIPE_ENGINE_CUDA_DEVICE_WEIGHTS_H_
#define LAYERPIPE_ENGINE_CUDA_DEVICE_WEIGHTS_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/cuda/device_buffer.h"
#include "engine/model/weights.h"

namespace layerpipe::cuda {

struct DeviceMatrix {
  DeviceBuffer data;  // [rows, cols], bf16 or fp32
  int64_t rows = 0;
  int64_t cols = 0;
};

struct DeviceLayer {
  DeviceMatrix qkv;      // rows: q (heads·hd), k (kv·hd), v (kv·hd) when has_v
  DeviceMatrix o;        // [hidden, heads·hd]
  DeviceMatrix gate_up;  // rows: gate (I), then up (I)
  DeviceMatrix down;     // [hidden, I]
  bool has_v = true;
  // fp32 gains, packed: input, post_attention, pre_feedforward, post_feedforward (hidden each), then
  // q_norm and k_norm (head_dim each).
  DeviceBuffer norms;
  const float* input_ln = nullptr;
  const float* post_attn_ln = nullptr;
  const float* pre_ff_ln = nullptr;
  const float* post_ff_ln = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  float layer_scalar = 1.0f;
};

// The first stage's image and audio embedders (MULTIMODAL.md): matrices as the layers' are, fp32 vectors.
struct DeviceVision {
  DeviceMatrix patch_dense;  // [hidden, patch values]
  DeviceMatrix projection;   // [hidden, hidden]
  DeviceBuffer vectors;      // what the pointers below point into
  const float* patch_ln1_weight = nullptr;
  const float* patch_ln1_bias = nullptr;
  const float* patch_dense_bias = nullptr;
  const float* patch_ln2_weight = nullptr;
  const float* patch_ln2_bias = nullptr;
  const float* pos_embedding = nullptr;  // [posemb][2][hidden]
  const float* pos_norm_weight = nullptr;
  const float* pos_norm_bias = nullptr;
};

class DeviceWeights {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceWeights>> Upload(const ModelWeights& w, bool fp32);

  const DeviceLayer& layer(int absolute_layer) const { return layers_[absolute_layer - layer_begin_]; }
  const DeviceMatrix& embed() const { return embed_; }  // empty unless the selection maps it
  const float* final_norm() const { return final_norm_.as<float>(); }
  // Null / empty unless the selection embeds and the checkpoint has them.
  const DeviceVision* vision() const { return vision_.get(); }
  const DeviceMatrix& audio_projection() const { return audio_; }  // [hidden, samples per token]
  bool fp32() const { return fp32_; }

 private:
  bool fp32_ = false;
  int layer_begin_ = 0;
  std::vector<DeviceLayer> layers_;
  DeviceMatrix embed_;
  DeviceBuffer final_norm_;
  std::unique_ptr<DeviceVision> vision_;
  DeviceMatrix audio_;
};

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_DEVICE_WEIGHTS_H_
