// Writes random checkpoints in the real Gemma 4 layout, for tests, benchmarks and the demo (no real
// weights can be downloaded here).
#ifndef LAYERPIPE_TOOLS_CHECKPOINT_CHECKPOINT_WRITER_H_
#define LAYERPIPE_TOOLS_CHECKPOINT_CHECKPOINT_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/config.h"

namespace layerpipe {

// Defaults are the real 12B shapes.
struct RandomCheckpointOptions {
  int layers = 48;
  int64_t hidden = 3840;
  int64_t intermediate = 15360;
  int64_t vocab = 262144;
  int heads = 16;
  int head_dim = 256;
  int kv_heads = 8;
  int global_head_dim = 512;
  int global_kv_heads = 1;
  int64_t window = 1024;
  int full_period = 6;                 // full layer where i % period == period - 1
  std::vector<LayerType> layer_types;  // overrides full_period when not empty
  bool k_eq_v = true;
  double partial_rotary = 0.25;
  double rope_theta_sliding = 10000.0;
  double rope_theta_full = 1000000.0;
  int64_t max_positions = 262144;
  uint64_t seed = 0;
  int shards = 0;             // 0: about one shard per 4 GB (at least 2); 1: a single model.safetensors
  bool flat_config = false;   // flat gemma4_unified_text config.json instead of the nested one
  // Without the vision embedder, the audio projection and their config sections. They are written only
  // when the vocabulary holds the soft-token ids (258880..258883), as the real one does.
  bool text_only = false;
  std::string tokenizer_json; // copied into the checkpoint when set
  // Decoder Linears in the compressed-tensors w4a16 layout of Google's QAT release (engine/model/
  // compressed_tensors.h), quantized from the same random bf16 values by the int4 rule (quantize.h), so
  // that the checkpoint holds the weights `--quantize int4` makes of its bf16 twin.
  bool w4a16 = false;
};

// The values of `make-checkpoint --quantization`: "none" (bf16) or "w4a16"; anything else is
// INVALID_ARGUMENT naming it.
absl::Status ParseCheckpointQuantizationFlag(const std::string& value, RandomCheckpointOptions* opt);

// Whether a checkpoint written with `opt` has the image and audio inputs.
bool WritesMultimodal(const RandomCheckpointOptions& opt);

absl::Status WriteRandomCheckpoint(const std::string& dir, const RandomCheckpointOptions& opt);

}  // namespace layerpipe

#endif  // LAYERPIPE_TOOLS_CHECKPOINT_CHECKPOINT_WRITER_H_
