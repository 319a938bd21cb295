// Model configuration of the Gemma 4 text stack (MODEL.md §1), parsed and validated from config.json.
#ifndef LAYERPIPE_ENGINE_MODEL_CONFIG_H_
#define LAYERPIPE_ENGINE_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/quantization_config.h"

namespace layerpipe {

enum class LayerType { kSliding, kFull };

const char* LayerTypeName(LayerType t);

// Rotary embedding of one layer type. inv_freq[i] = theta^(-2i/head_dim) for i < rotary_pairs, 0 after:
// "proportional" rope rotates only the first rotary_pairs pairs of a rotate-half head.
struct RopeConfig {
  double theta = 10000.0;
  double partial_rotary_factor = 1.0;
  // The pairs of a rotate-half head of head_dim that rotate (dims i and head_dim/2 + i, i < pairs).
  int Pairs(int head_dim) const {
    const int pairs = static_cast<int>(partial_rotary_factor * head_dim / 2);
    return pairs < head_dim / 2 ? pairs : head_dim / 2;
  }
};

// Gemma 4 unified's encoder-free image input (MULTIMODAL.md): one soft token per block of
// model_patch_size² pixels, at most num_soft_tokens of them per image.
struct VisionConfig {
  bool present = false;  // config.json has a vision_config
  int64_t model_patch_size = 48;
  int64_t num_soft_tokens = 280;
  int64_t posemb_size = 1120;  // rows of pos_embedding: the largest block column or row index + 1
  double rms_norm_eps = 1e-6;
  // The PyTorch LayerNorms of the embedder use their default eps.
  double layer_norm_eps = 1e-5;
  int64_t patch_values() const { return model_patch_size * model_patch_size * 3; }
};

// The audio input: one soft token per frame of samples_per_token 16 kHz samples.
struct AudioConfig {
  bool present = false;
  int64_t samples_per_token = 640;
  double rms_norm_eps = 1e-6;
};

// The ids that frame and stand for soft tokens in a prompt (MODEL.md §1).
struct MultimodalTokenIds {
  int32_t image = 258880;
  int32_t boi = 255999;
  int32_t eoi = 258882;
  int32_t audio = 258881;
  int32_t boa = 256000;
  int32_t eoa = 258883;
};

struct ModelConfig {
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int head_dim = 0;             // sliding layers
  int num_kv_heads = 0;         // sliding layers
  int global_head_dim = 0;      // full layers
  int num_global_kv_heads = 0;  // full layers, when k_eq_v (FullKvHeads)
  std::vector<LayerType> layer_types;
  bool k_eq_v = false;
  int64_t sliding_window = 0;
  RopeConfig rope_sliding;
  RopeConfig rope_full;
  double rms_norm_eps = 1e-6;
  double final_logit_softcapping = 0.0;  // 0 = off
  int64_t max_position_embeddings = 0;
  int32_t bos_token_id = 2;
  int32_t eos_token_id = 1;
  int32_t pad_token_id = 0;
  VisionConfig vision;
  AudioConfig audio;
  MultimodalTokenIds mm_ids;
  // A checkpoint quantized ahead of time (Google's QAT int4 release): its decoder Linears are packed.
  CheckpointQuantization quantization;

  int HeadDim(int layer) const {
    return layer_types[layer] == LayerType::kFull ? global_head_dim : head_dim;
  }
  // KV heads of a full layer, as HF counts them: num_global_key_value_heads only with k_eq_v (where
  // V is the raw key); without it a full layer has num_key_value_heads, like a sliding one.
  int FullKvHeads() const { return k_eq_v ? num_global_kv_heads : num_kv_heads; }
  int KvHeads(int layer) const { return layer_types[layer] == LayerType::kFull ? FullKvHeads() : num_kv_heads; }
  const RopeConfig& Rope(int layer) const {
    return layer_types[layer] == LayerType::kFull ? rope_full : rope_sliding;
  }
  // Full layers with k_eq_v have no v_proj: V is the un-normed, un-rotated key projection.
  bool HasVProj(int layer) const { return !(k_eq_v && layer_types[layer] == LayerType::kFull); }
  // Pairs of a head of `layer` that rotate; the rest pass unchanged.
  int RotaryPairs(int layer) const { return Rope(layer).Pairs(HeadDim(layer)); }
};

// Parses config.json text (nested "text_config" of gemma4_unified, or the flat gemma4_unified_text form).
// `source` names the file in error messages.
absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& source);

// Reads DIR/config.json.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_MODEL_CONFIG_H_
