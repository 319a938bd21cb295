// The text-stack weights of a layer range, checked against the config; matrices are WeightMatrix
// (engine/model/weight_matrix.h), bf16 ones kept in the mapping.
#ifndef LAYERPIPE_ENGINE_MODEL_WEIGHTS_H_
#define LAYERPIPE_ENGINE_MODEL_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/huge_pages.h"
#include "engine/model/safetensors.h"
#include "engine/model/weight_matrix.h"

namespace layerpipe {

struct LayerWeights {
  WeightMatrix q_proj, k_proj, v_proj /* empty on k_eq_v full layers */, o_proj;
  WeightMatrix gate_proj, up_proj, down_proj;
  // Norm gains as stored (used as w, not 1+w), widened to fp32.
  std::vector<float> input_layernorm, post_attention_layernorm, pre_feedforward_layernorm,
      post_feedforward_layernorm, q_norm, k_norm;
  float layer_scalar = 1.0f;
};

// The encoder-free vision embedder (MULTIMODAL.md), in the order it is applied to a block of pixels.
struct VisionWeights {
  std::vector<float> patch_ln1_weight, patch_ln1_bias;  // [patch values]
  WeightMatrix patch_dense;                               // [hidden, patch values]
  std::vector<float> patch_dense_bias, patch_ln2_weight, patch_ln2_bias;
  std::vector<float> pos_embedding;                     // [posemb][2][hidden]: column, then row
  std::vector<float> pos_norm_weight, pos_norm_bias;
  WeightMatrix projection;                                // embed_vision.embedding_projection [hidden, hidden]
};

// What a caller wants mapped: layers [begin, end), plus the embedding (first stage) and/or the final
// norm with the tied head (last stage).
struct WeightSelection {
  int layer_begin = 0;
  int layer_end = 0;
  bool embedding = false;
  bool head = false;
};

// huge_pages: copy the weights into memory backed by huge pages (engine/model/huge_pages.h) instead of
// reading them in place from the mapped files; for stages that compute on the host.
// tile_layer_matrices: with huge_pages, store the layers' projection matrices, and the embedding where
// this stage computes the tied head, tiled where their format and width allow (CanTile), for a CPU
// stage (every CPU matmul kernel reads that order).
// quantize: the format every decoder layer's projection matrix is quantized into while it loads
// (engine/model/quantize.h), read once from the mapping and then released, so that the quantized bytes
// are what the process holds; kBf16 keeps them as stored. The embedders stay as stored.
// quantize_head: the same for the embedding (the tied head, where a stage holds either): kBf16 keeps it
// as stored, kInt8 quantizes it by the int8 rule, so that token lookups and the head read the same q · s
// on every stage.
struct WeightLoadOptions {
  bool huge_pages = false;
  bool tile_layer_matrices = false;
  WeightFormat quantize = WeightFormat::kBf16;
  WeightFormat quantize_head = WeightFormat::kBf16;
};

class ModelWeights {
 public:
  static absl::StatusOr<std::unique_ptr<ModelWeights>> Load(const std::string& model_dir, const ModelConfig& config,
                                                            const WeightSelection& sel,
                                                            const WeightLoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const WeightSelection& selection() const { return sel_; }
  // `layer` is the absolute layer index, inside the selection.
  const LayerWeights& layer(int layer) const { return layers_[layer - sel_.layer_begin]; }
  const WeightMatrix& embed_tokens() const { return embed_; }
  const std::vector<float>& final_norm() const { return final_norm_; }
  // The stage that embeds holds the image and audio embedders when the checkpoint has them; null
  // otherwise (a text-only checkpoint, or another stage).
  const VisionWeights* vision() const { return vision_.get(); }
  const WeightMatrix* audio_projection() const { return audio_.empty() ? nullptr : &audio_; }
  // Whether any matrix is stored tiled (WeightLoadOptions::tile_layer_matrices took effect).
  bool matrices_tiled() const { return matrices_tiled_; }
  // Bytes of the layer's matrices, in their formats: what a decode step streams through (the
  // roofline's numerator) and what the worker's KV budget leaves aside.
  size_t LayerMatrixBytes(int layer) const;
  // Every matrix held (layers, embedding, embedders), and their resident bytes by format for the load
  // log ("1.20 GB bf16").
  std::vector<const WeightMatrix*> Matrices() const;
  std::string MatrixFormatSummary() const;

 private:
  ModelConfig config_;
  WeightSelection sel_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::vector<LayerWeights> layers_;
  WeightMatrix embed_;
  std::vector<float> final_norm_;
  std::unique_ptr<VisionWeights> vision_;
  WeightMatrix audio_;  // embed_audio.embedding_projection [hidden, samples per token]
  bool matrices_tiled_ = false;
  // Matrices stored as F16/F32 on disk are converted to bf16 here; bf16 ones stay in the mapping.
  std::vector<std::vector<uint16_t>> converted_;
  // The quantized matrices (WeightLoadOptions::quantize and quantize_head, and a packed checkpoint's
  // layers unpacked), all in one allocation.
  std::unique_ptr<HugePageBuffer> quantized_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_MODEL_WEIGHTS_H_
