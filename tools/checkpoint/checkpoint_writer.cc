#include "tools/checkpoint/checkpoint_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/model/bf16.h"
#include "engine/model/compressed_tensors.h"
#include "engine/model/quantize.h"
#include "engine/model/safetensors.h"
#include "nlohmann/json.hpp"

namespace layerpipe {
namespace {

using json = nlohmann::json;

constexpr uint64_t kSplitMixGamma = 0x9E3779B97F4A7C15ull;

uint64_t SplitMix(uint64_t& s) {
  uint64_t z = (s += kSplitMixGamma);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t NameSeed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

// bf16 values uniform in [center - half_width, center + half_width), seeded by tensor name so a
// tensor's values do not depend on the sharding.
TensorBlob Uniform(uint64_t seed, const std::string& name, std::vector<int64_t> shape, double center,
                   double half_width) {
  TensorBlob t{name, DType::kBF16, std::move(shape), {}};
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  t.bytes.resize(static_cast<size_t>(n) * 2);
  uint16_t* out = reinterpret_cast<uint16_t*>(t.bytes.data());
  const uint64_t s0 = NameSeed(seed, name);
  const float c = static_cast<float>(center), w = static_cast<float>(2 * half_width);
  auto fill = [&](int64_t begin, int64_t end) {
    // SplitMix's state after i draws is s0 + i·gamma, so any slice can start on its own.
    uint64_t s = s0 + static_cast<uint64_t>(begin) * kSplitMixGamma;
    for (int64_t i = begin; i < end; ++i) {
      float u = static_cast<float>(SplitMix(s) >> 40) * (1.0f / 16777216.0f);  // [0,1)
      out[i] = F32ToBf16(c + w * (u - 0.5f));
    }
  };
  // The full 12B shape is 12 G values: spread big tensors over the cores (same values either way).
  const int64_t parts = std::min<int64_t>(std::max(1u, std::thread::hardware_concurrency()), n / (1 << 20) + 1);
  std::vector<std::thread> workers;
  for (int64_t p = 1; p < parts; ++p) workers.emplace_back(fill, n * p / parts, n * (p + 1) / parts);
  fill(0, n / parts);
  for (std::thread& th : workers) th.join();
  return t;
}

// Uniform with standard deviation `std` around 0.
TensorBlob Random(uint64_t seed, const std::string& name, std::vector<int64_t> shape, double std) {
  return Uniform(seed, name, std::move(shape), 0.0, std * std::sqrt(3.0));
}

// A bf16 [out, in] Linear as compressed-tensors stores it: int4 q + 8 packed eight to an int32 word
// (value 8j + i of a row in bits 4i..4i+3 of word j), bf16 scales per group of kQuantGroup, and the shape.
std::vector<TensorBlob> PackW4A16(const TensorBlob& w) {
  const int64_t rows = w.shape[0], cols = w.shape[1], groups = cols / kQuantGroup;
  const std::string base = PackedTensorName(w.name, "");
  TensorBlob packed{base + std::string(kPackedSuffix), DType::kI32, {rows, cols / 8}, {}};
  TensorBlob scale{base + std::string(kScaleSuffix), DType::kBF16, {rows, groups}, {}};
  TensorBlob shape{base + std::string(kShapeSuffix), DType::kI64, {2}, std::vector<uint8_t>(16)};
  packed.bytes.resize(static_cast<size_t>(rows * cols / 2));
  scale.bytes.resize(static_cast<size_t>(rows * groups * 2));
  std::memcpy(shape.bytes.data(), &rows, 8);
  std::memcpy(shape.bytes.data() + 8, &cols, 8);
  const auto* src = reinterpret_cast<const uint16_t*>(w.bytes.data());
  auto* words = reinterpret_cast<uint32_t*>(packed.bytes.data());
  auto* scales = reinterpret_cast<uint16_t*>(scale.bytes.data());
  ForRowRanges(rows, [&](int64_t r0, int64_t r1) {
    float values[kQuantGroup];
    int8_t q[kQuantGroup];
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t g = 0; g < groups; ++g) {
        for (int64_t i = 0; i < kQuantGroup; ++i) values[i] = Bf16ToF32(src[r * cols + g * kQuantGroup + i]);
        scales[r * groups + g] = QuantizeGroupInt4(values, kQuantGroup, q);
        for (int64_t j = 0; j < kQuantGroup / 8; ++j) {
          uint32_t word = 0;
          for (int i = 0; i < 8; ++i) word |= static_cast<uint32_t>(q[8 * j + i] + 8) << (4 * i);
          words[r * (cols / 8) + g * (kQuantGroup / 8) + j] = word;
        }
      }
    }
  });
  std::vector<TensorBlob> out;
  out.push_back(std::move(packed));
  out.push_back(std::move(scale));
  out.push_back(std::move(shape));
  return out;
}

// config.json's quantization_config for a w4a16 checkpoint: what Google's QAT release declares.
json W4A16Config() {
  return {{"quant_method", "compressed-tensors"},
          {"format", "pack-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"format", "pack-quantized"},
              {"weights",
               {{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"strategy", "group"},
                {"group_size", kQuantGroup}, {"actorder", nullptr}, {"dynamic", false}, {"observer", "minmax"}}},
              {"input_activations", nullptr},
              {"output_activations", nullptr}}}}},
          {"ignore", {"lm_head", "re:.*embed_tokens.*", "re:.*vision_embedder.*", "re:.*embed_vision.*",
                      "re:.*embed_audio.*"}},
          {"kv_cache_scheme", nullptr},
          {"sparsity_config", json::object()}};
}

json TextConfig(const RandomCheckpointOptions& o, const std::vector<LayerType>& types) {
  json lt = json::array();
  for (LayerType t : types) lt.push_back(LayerTypeName(t));
  return {
      {"model_type", "gemma4_unified_text"},
      {"hidden_size", o.hidden},
      {"intermediate_size", o.intermediate},
      {"vocab_size", o.vocab},
      {"num_hidden_layers", o.layers},
      {"num_attention_heads", o.heads},
      {"head_dim", o.head_dim},
      {"num_key_value_heads", o.kv_heads},
      {"global_head_dim", o.global_head_dim},
      {"num_global_key_value_heads", o.global_kv_heads},
      {"layer_types", lt},
      {"attention_k_eq_v", o.k_eq_v},
      {"sliding_window", o.window},
      {"rope_parameters",
       {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", o.rope_theta_sliding}}},
        {"full_attention",
         {{"rope_type", "proportional"}, {"partial_rotary_factor", o.partial_rotary},
          {"rope_theta", o.rope_theta_full}}}}},
      {"rms_norm_eps", 1e-6},
      {"final_logit_softcapping", 30.0},
      {"max_position_embeddings", o.max_positions},
      {"hidden_activation", "gelu_pytorch_tanh"},
      {"num_kv_shared_layers", 0},
      {"enable_moe_block", false},
      {"hidden_size_per_layer_input", 0},
      {"bos_token_id", 2},
      {"eos_token_id", 1},
      {"pad_token_id", 0},
  };
}

// The 12B's vision and audio sections (MULTIMODAL.md, "Checkpoint").
constexpr int64_t kPatchValues = 48 * 48 * 3;
constexpr int64_t kPosembSize = 1120;
constexpr int64_t kAudioSamplesPerToken = 640;

json FullConfig(const RandomCheckpointOptions& o, const std::vector<LayerType>& types) {
  json tc = TextConfig(o, types);
  if (o.w4a16) tc["quantization_config"] = W4A16Config();  // read at the root of either form
  if (o.flat_config) return tc;
  json config = {
      {"architectures", {"Gemma4UnifiedForConditionalGeneration"}},
      {"model_type", "gemma4_unified"},
      {"text_config", tc},
      {"image_token_id", 258880},
      {"boi_token_id", 255999},
      {"eoi_token_id", 258882},
      {"audio_token_id", 258881},
      {"boa_token_id", 256000},
      {"eoa_token_index", 258883},
      {"video_token_id", 258884},
      {"bos_token_id", 2},
      {"eos_token_id", 1},
      {"pad_token_id", 0},
  };
  if (o.w4a16) {
    config["quantization_config"] = tc["quantization_config"];
    config["text_config"].erase("quantization_config");
  }
  if (WritesMultimodal(o)) {
    config["vision_config"] = {{"model_type", "gemma4_unified_vision"}, {"patch_size", 16},
                               {"pooling_kernel_size", 3}, {"model_patch_size", 48},
                               {"mm_embed_dim", o.hidden}, {"mm_posemb_size", kPosembSize},
                               {"num_soft_tokens", 280}, {"output_proj_dims", o.hidden},
                               {"rms_norm_eps", 1e-6}};
    config["audio_config"] = {{"model_type", "gemma4_unified_audio"}, {"audio_embed_dim", kAudioSamplesPerToken},
                              {"audio_samples_per_token", kAudioSamplesPerToken}, {"hidden_size", 640},
                              {"output_proj_dims", 640}, {"rms_norm_eps", 1e-6}};
  }
  return config;
}

// The embedders' tensors. Scales keep every stage O(1): a soft token's rows are RMS-normalised before the
// projection, so with a 1/sqrt(in) projection they come out as large as the scaled text embeddings.
std::vector<TensorBlob> MakeEmbedderTensors(const RandomCheckpointOptions& o) {
  std::vector<TensorBlob> out;
  const int64_t H = o.hidden;
  const std::string v = "model.vision_embedder.";
  out.push_back(Uniform(o.seed, v + "patch_ln1.weight", {kPatchValues}, 1.0, 0.1));
  out.push_back(Uniform(o.seed, v + "patch_ln1.bias", {kPatchValues}, 0.0, 0.1));
  out.push_back(Random(o.seed, v + "patch_dense.weight", {H, kPatchValues}, 1.0 / std::sqrt(double(kPatchValues))));
  out.push_back(Uniform(o.seed, v + "patch_dense.bias", {H}, 0.0, 0.1));
  for (const char* ln : {"patch_ln2", "pos_norm"}) {
    out.push_back(Uniform(o.seed, v + ln + ".weight", {H}, 1.0, 0.1));
    out.push_back(Uniform(o.seed, v + ln + ".bias", {H}, 0.0, 0.1));
  }
  out.push_back(Random(o.seed, v + "pos_embedding", {kPosembSize, 2, H}, 0.5));
  out.push_back(Random(o.seed, "model.embed_vision.embedding_projection.weight", {H, H}, 1.0 / std::sqrt(double(H))));
  out.push_back(Random(o.seed, "model.embed_audio.embedding_projection.weight", {H, kAudioSamplesPerToken},
                       1.0 / std::sqrt(double(kAudioSamplesPerToken))));
  return out;
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot write"));
  return absl::OkStatus();
}

// Tensors of one layer, or of the embedding/final norm (layer == -1).
std::vector<TensorBlob> MakeTensors(const RandomCheckpointOptions& o, const std::vector<LayerType>& types,
                                    const std::string& prefix, int layer) {
  std::vector<TensorBlob> out;
  const int64_t H = o.hidden, I = o.intermediate;
  if (layer < 0) {
    out.push_back(Random(o.seed, prefix + "embed_tokens.weight", {o.vocab, H}, 1.0 / std::sqrt(double(H))));
    out.push_back(Uniform(o.seed, prefix + "norm.weight", {H}, 1.0, 0.2));
    if (WritesMultimodal(o)) {
      for (TensorBlob& t : MakeEmbedderTensors(o)) out.push_back(std::move(t));
    }
    return out;
  }
  const bool full = types[layer] == LayerType::kFull;
  // A full layer's KV heads as HF counts them (ModelConfig::FullKvHeads).
  const int64_t hd = full ? o.global_head_dim : o.head_dim, kv = full && o.k_eq_v ? o.global_kv_heads : o.kv_heads;
  const std::string p = absl::StrCat(prefix, "layers.", layer, ".");
  auto lin = [&](const char* name, int64_t rows, int64_t cols) {
    TensorBlob w = Random(o.seed, p + name, {rows, cols}, 1.0 / std::sqrt(double(cols)));
    if (!o.w4a16) {
      out.push_back(std::move(w));
      return;
    }
    for (TensorBlob& t : PackW4A16(w)) out.push_back(std::move(t));
  };
  lin("self_attn.q_proj.weight", o.heads * hd, H);
  lin("self_attn.k_proj.weight", kv * hd, H);
  if (!(full && o.k_eq_v)) lin("self_attn.v_proj.weight", kv * hd, H);
  lin("self_attn.o_proj.weight", H, o.heads * hd);
  lin("mlp.gate_proj.weight", I, H);
  lin("mlp.up_proj.weight", I, H);
  lin("mlp.down_proj.weight", H, I);
  for (const char* n : {"input_layernorm.weight", "post_attention_layernorm.weight",
                        "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight"}) {
    out.push_back(Uniform(o.seed, p + n, {H}, 1.0, 0.2));
  }
  // Gains near head_dim^(-1/4) keep attention scores O(1) with the model's scale of 1.0 (MODEL.md §5).
  const double g = std::pow(double(hd), -0.25);
  out.push_back(Uniform(o.seed, p + "self_attn.q_norm.weight", {hd}, g, 0.1 * g));
  out.push_back(Uniform(o.seed, p + "self_attn.k_norm.weight", {hd}, g, 0.1 * g));
  out.push_back(Uniform(o.seed, p + "layer_scalar", {1}, 0.8, 0.4));
  return out;
}

}  // namespace

bool WritesMultimodal(const RandomCheckpointOptions& o) {
  return !o.text_only && !o.flat_config && o.vocab > 258883;
}

absl::Status ParseCheckpointQuantizationFlag(const std::string& value, RandomCheckpointOptions* opt) {
  if (value == "none" || value == "w4a16") {
    opt->w4a16 = value == "w4a16";
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("--quantization must be none or w4a16, got \"", value, "\""));
}

absl::Status WriteRandomCheckpoint(const std::string& dir, const RandomCheckpointOptions& o) {
  std::vector<LayerType> types = o.layer_types;
  if (types.empty()) {
    if (o.full_period <= 0) return absl::InvalidArgumentError("full_period must be positive");
    for (int i = 0; i < o.layers; ++i) {
      types.push_back(i % o.full_period == o.full_period - 1 ? LayerType::kFull : LayerType::kSliding);
    }
  }
  if (static_cast<int>(types.size()) != o.layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer types list has ", types.size(), " entries for ", o.layers, " layers"));
  }
  if (o.w4a16 && (o.hidden % kQuantGroup != 0 || o.intermediate % kQuantGroup != 0 ||
                  (o.heads * o.head_dim) % kQuantGroup != 0 || (o.heads * o.global_head_dim) % kQuantGroup != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("--quantization w4a16 needs every Linear's input size (hidden, "
                                                   "intermediate, heads x head dims) to be a multiple of ",
                                                   kQuantGroup));
  }
  // Validate the shape parameters through the same parser the engine uses.
  const std::string config_text = FullConfig(o, types).dump(2);
  if (auto c = ParseModelConfig(config_text, "generated config"); !c.ok()) return c.status();

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(dir, ": cannot create directory: ", ec.message()));
  const std::string prefix = o.flat_config ? "model." : "model.language_model.";

  // Size estimate to pick the shard count (the 12B is ~24 GB → 6 shards).
  const double layer_bytes =
      (o.w4a16 ? 0.53 : 2.0) * (3.0 * o.hidden * o.intermediate + 2.0 * o.heads * o.global_head_dim * o.hidden +
             2.0 * o.kv_heads * o.head_dim * o.hidden);
  const double total = layer_bytes * o.layers + 2.0 * o.vocab * o.hidden;
  int shards = o.shards > 0 ? o.shards : std::max(2, static_cast<int>(std::ceil(total / 4e9)));
  shards = std::min(shards, o.layers + 1);

  // Unit 0 is the embedding + final norm, unit i+1 is layer i; units are spread contiguously over shards.
  const int units = o.layers + 1;
  json weight_map = json::object();
  uint64_t total_bytes = 0;
  for (int s = 0; s < shards; ++s) {
    const int u0 = static_cast<int>(int64_t(units) * s / shards), u1 = static_cast<int>(int64_t(units) * (s + 1) / shards);
    std::vector<TensorBlob> blobs;
    for (int u = u0; u < u1; ++u) {
      for (TensorBlob& t : MakeTensors(o, types, prefix, u - 1)) blobs.push_back(std::move(t));
    }
    const std::string file =
        shards == 1 ? "model.safetensors" : absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, shards);
    std::vector<const TensorBlob*> ptrs;
    for (const TensorBlob& t : blobs) {
      ptrs.push_back(&t);
      weight_map[t.name] = file;
      total_bytes += t.bytes.size();
    }
    if (auto st = WriteSafetensors(dir + "/" + file, ptrs); !st.ok()) return st;
  }
  if (shards > 1) {
    json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    if (auto st = WriteText(dir + "/model.safetensors.index.json", index.dump(2)); !st.ok()) return st;
  }
  if (auto st = WriteText(dir + "/config.json", config_text); !st.ok()) return st;
  json gen = {{"bos_token_id", 2}, {"eos_token_id", {1, 106, 50}}, {"pad_token_id", 0}};
  if (auto st = WriteText(dir + "/generation_config.json", gen.dump(2)); !st.ok()) return st;
  if (!o.tokenizer_json.empty()) {
    std::filesystem::copy_file(o.tokenizer_json, dir + "/tokenizer.json",
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return absl::NotFoundError(absl::StrCat(o.tokenizer_json, ": cannot copy tokenizer: ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace layerpipe
