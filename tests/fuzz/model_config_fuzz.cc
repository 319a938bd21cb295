// libFuzzer target: the config.json loader (ParseModelConfig). The input is the file's text.
//
// Checked on every accepted config: one layer type per layer, the per-layer accessors agree with the
// fields they select, and the sizes Validate promises are positive.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/model/config.h"

namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "model_config_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = layerpipe::ParseModelConfig(text, "fuzz/config.json");
  if (!config.ok()) {
    Check(!config.status().message().empty(), "an error without a message");
    return 0;
  }
  const layerpipe::ModelConfig& c = *config;
  Check(c.num_layers > 0, "num_layers is not positive");
  Check(static_cast<int64_t>(c.layer_types.size()) == c.num_layers, "layer_types.size() != num_layers");
  Check(c.hidden_size > 0 && c.intermediate_size > 0 && c.vocab_size > 0 && c.max_position_embeddings > 0,
        "a size is not positive");
  Check(c.num_heads > 0 && c.num_kv_heads > 0 && c.num_global_kv_heads > 0, "a head count is not positive");
  Check(c.num_heads % c.num_kv_heads == 0 && (!c.k_eq_v || c.num_heads % c.num_global_kv_heads == 0), "heads % kv_heads != 0");
  Check(c.head_dim > 0 && c.global_head_dim > 0 && c.head_dim % 2 == 0 && c.global_head_dim % 2 == 0,
        "a head dim is not positive and even");
  Check(c.bos_token_id >= 0 && c.bos_token_id < c.vocab_size, "bos outside the vocabulary");
  Check(c.eos_token_id >= 0 && c.eos_token_id < c.vocab_size, "eos outside the vocabulary");
  for (int l = 0; l < c.num_layers; ++l) {
    const bool full = c.layer_types[l] == layerpipe::LayerType::kFull;
    Check(c.HeadDim(l) == (full ? c.global_head_dim : c.head_dim), "HeadDim");
    Check(c.KvHeads(l) == (full && c.k_eq_v ? c.num_global_kv_heads : c.num_kv_heads), "KvHeads");
    const layerpipe::RopeConfig& rope = c.Rope(l);
    Check(rope.theta > 0 && rope.partial_rotary_factor > 0 && rope.partial_rotary_factor <= 1, "rope");
    Check(c.HasVProj(l) == !(c.k_eq_v && full), "HasVProj");
    if (!full) Check(c.sliding_window > 0, "a sliding layer without a window");
    (void)layerpipe::LayerTypeName(c.layer_types[l]);
  }
  return 0;
}
