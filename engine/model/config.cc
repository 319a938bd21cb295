#include "engine/model/config.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "common/json_shown.h"
#include "engine/model/quantization_config.h"

namespace layerpipe {
namespace {

using json = nlohmann::json;

absl::Status Err(const std::string& source, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", msg));
}


// Upper bounds on the sizes a config may declare. Each is far above any Gemma model (the 12B: hidden 3840,
// intermediate 15360, vocabulary 262144, 48 layers, 16 heads of 256/512, context 262144) and low enough
// that the products the engine forms from them (weights, KV rows, logits) stay far from int64 overflow,
// and that a corrupt file is refused here, naming the key, instead of by an allocation later.
constexpr int64_t kMaxHiddenSize = int64_t{1} << 20;
constexpr int64_t kMaxIntermediateSize = int64_t{1} << 22;
constexpr int64_t kMaxVocabSize = int64_t{1} << 24;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxHeadDim = int64_t{1} << 16;
constexpr int64_t kMaxPositions = int64_t{1} << 24;

// Reads an integer key; `required` keys that are absent are an error naming the key.
absl::Status GetInt(const json& j, const char* key, bool required, int64_t* out, const std::string& src) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    return required ? Err(src, absl::StrCat("missing required key \"", key, "\"")) : absl::OkStatus();
  }
  if (!it->is_number_integer()) return Err(src, absl::StrCat("key \"", key, "\" must be an integer"));
  // An unsigned value above INT64_MAX would wrap to a negative one through get<int64_t>().
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return Err(src, absl::StrCat("key \"", key, "\" = ", it->get<uint64_t>(), " is out of range"));
  }
  *out = it->get<int64_t>();
  return absl::OkStatus();
}

// A size that must lie in [lo, hi]; the error names the key and the value.
absl::Status CheckRange(const char* key, int64_t v, int64_t lo, int64_t hi, const std::string& src) {
  if (v < lo) {
    return Err(src, lo == 1 ? absl::StrCat("\"", key, "\" must be positive, got ", v)
                            : absl::StrCat("\"", key, "\" = ", v, " is below the minimum of ", lo));
  }
  if (v > hi) return Err(src, absl::StrCat("\"", key, "\" = ", v, " exceeds the supported maximum of ", hi));
  return absl::OkStatus();
}

// An optional string key (absent or null: `fallback`); any other type is an error naming `path`.
absl::Status GetString(const json& j, const char* key, const std::string& path, std::string fallback,
                       std::string* out, const std::string& src) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    *out = std::move(fallback);
    return absl::OkStatus();
  }
  if (!it->is_string()) {
    return Err(src, absl::StrCat("key \"", path, "\" must be a string, got ", Shown(*it)));
  }
  *out = it->get<std::string>();
  return absl::OkStatus();
}

absl::Status GetDouble(const json& j, const char* key, double* out, const std::string& src) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) return Err(src, absl::StrCat("key \"", key, "\" must be a number"));
  *out = it->get<double>();
  return absl::OkStatus();
}

absl::Status ParseRopeEntry(const json& j, const std::string& key, RopeConfig* rope, const std::string& src) {
  if (!j.is_object()) return Err(src, absl::StrCat("\"", key, "\" must be an object"));
  std::string type;
  if (auto st = GetString(j, "rope_type", absl::StrCat(key, ".rope_type"), "default", &type, src); !st.ok()) return st;
  if (auto st = GetDouble(j, "rope_theta", &rope->theta, src); !st.ok()) return st;
  if (auto st = GetDouble(j, "partial_rotary_factor", &rope->partial_rotary_factor, src); !st.ok()) return st;
  if (type != "default" && type != "proportional") {
    return Err(src, absl::StrCat("\"", key, ".rope_type\" = \"", type,
                                 "\" is not supported (expected \"default\" or \"proportional\")"));
  }
  if (type == "default" && rope->partial_rotary_factor != 1.0) {
    return Err(src, absl::StrCat("\"", key, ".partial_rotary_factor\" requires rope_type \"proportional\""));
  }
  return absl::OkStatus();
}

// Two spellings exist: rope_parameters keyed by layer type, and Gemma-3-style top-level keys.
absl::Status ParseRope(const json& tc, ModelConfig* c, const std::string& src) {
  c->rope_sliding = {10000.0, 1.0};
  c->rope_full = {1000000.0, 1.0};
  if (auto it = tc.find("rope_parameters"); it != tc.end() && !it->is_null()) {
    const json& rp = *it;
    if (rp.contains("sliding_attention") || rp.contains("full_attention")) {
      if (rp.contains("sliding_attention")) {
        if (auto st = ParseRopeEntry(rp["sliding_attention"], "rope_parameters.sliding_attention",
                                     &c->rope_sliding, src);
            !st.ok())
          return st;
      }
      if (rp.contains("full_attention")) {
        if (auto st = ParseRopeEntry(rp["full_attention"], "rope_parameters.full_attention",
                                     &c->rope_full, src);
            !st.ok())
          return st;
      }
      return absl::OkStatus();
    }
    // A single entry applies to the full layers; sliding layers keep their local base below.
    if (auto st = ParseRopeEntry(rp, "rope_parameters", &c->rope_full, src); !st.ok()) return st;
  } else {
    if (auto st = GetDouble(tc, "rope_theta", &c->rope_full.theta, src); !st.ok()) return st;
    if (auto st = GetDouble(tc, "partial_rotary_factor", &c->rope_full.partial_rotary_factor, src); !st.ok())
      return st;
  }
  if (auto st = GetDouble(tc, "rope_local_base_freq", &c->rope_sliding.theta, src); !st.ok()) return st;
  if (auto it = tc.find("rope_scaling"); it != tc.end() && !it->is_null()) {
    return Err(src, "\"rope_scaling\" is not supported by gemma4_unified");
  }
  return absl::OkStatus();
}

absl::Status RejectUnsupported(const json& tc, const std::string& src) {
  int64_t v = 0;
  if (auto st = GetInt(tc, "num_kv_shared_layers", false, &v, src); !st.ok()) return st;
  if (v != 0) return Err(src, "\"num_kv_shared_layers\" != 0 (KV sharing) is not supported");
  v = 0;
  if (auto st = GetInt(tc, "hidden_size_per_layer_input", false, &v, src); !st.ok()) return st;
  if (v != 0) return Err(src, "\"hidden_size_per_layer_input\" != 0 (per-layer inputs) is not supported");
  if (auto it = tc.find("enable_moe_block"); it != tc.end() && !it->is_null()) {
    if (!it->is_boolean()) return Err(src, "key \"enable_moe_block\" must be a boolean");
    if (it->get<bool>()) return Err(src, "\"enable_moe_block\" = true (MoE) is not supported");
  }
  return absl::OkStatus();
}

absl::Status ParseLayerTypes(const json& tc, ModelConfig* c, const std::string& src) {
  auto it = tc.find("layer_types");
  if (it == tc.end() || it->is_null()) {
    // Gemma-3-style configs give a period instead of a list.
    int64_t period = 0;
    if (auto st = GetInt(tc, "sliding_window_pattern", false, &period, src); !st.ok()) return st;
    if (period <= 0) return Err(src, "missing required key \"layer_types\"");
    for (int i = 0; i < c->num_layers; ++i) {
      c->layer_types.push_back((i + 1) % period == 0 ? LayerType::kFull : LayerType::kSliding);
    }
    return absl::OkStatus();
  }
  if (!it->is_array()) return Err(src, "\"layer_types\" must be a list");
  if (static_cast<int64_t>(it->size()) != c->num_layers) {
    return Err(src, absl::StrCat("\"layer_types\" has ", it->size(), " entries but num_hidden_layers is ",
                                 c->num_layers));
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    std::string s = t.is_string() ? t.get<std::string>() : Shown(t);
    if (s == "sliding_attention") {
      c->layer_types.push_back(LayerType::kSliding);
    } else if (s == "full_attention") {
      c->layer_types.push_back(LayerType::kFull);
    } else {
      return Err(src, absl::StrCat("\"layer_types[", i, "]\" = ", s,
                                   " (expected \"sliding_attention\" or \"full_attention\")"));
    }
  }
  return absl::OkStatus();
}

absl::Status Validate(const ModelConfig& c, const std::string& src) {
  // The head counts and dims were range-checked before they were narrowed to int (ParseModelConfig).
  for (auto [key, v, hi] : std::initializer_list<std::tuple<const char*, int64_t, int64_t>>{
           {"hidden_size", c.hidden_size, kMaxHiddenSize},
           {"intermediate_size", c.intermediate_size, kMaxIntermediateSize},
           {"vocab_size", c.vocab_size, kMaxVocabSize},
           {"num_hidden_layers", c.num_layers, kMaxLayers},
           {"num_attention_heads", c.num_heads, kMaxHeads},
           {"head_dim", c.head_dim, kMaxHeadDim},
           {"num_key_value_heads", c.num_kv_heads, kMaxHeads},
           {"global_head_dim", c.global_head_dim, kMaxHeadDim},
           {"num_global_key_value_heads", c.num_global_kv_heads, kMaxHeads},
           {"max_position_embeddings", c.max_position_embeddings, kMaxPositions}}) {
    if (auto st = CheckRange(key, v, 1, hi, src); !st.ok()) return st;
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return Err(src, absl::StrCat("num_attention_heads (", c.num_heads, ") is not a multiple of num_key_value_heads (",
                                 c.num_kv_heads, ")"));
  }
  if (c.k_eq_v && c.num_heads % c.num_global_kv_heads != 0) {  // only k_eq_v full layers use it
    return Err(src, absl::StrCat("num_attention_heads (", c.num_heads,
                                 ") is not a multiple of num_global_key_value_heads (", c.num_global_kv_heads, ")"));
  }
  if (c.head_dim % 2 != 0 || c.global_head_dim % 2 != 0) {
    return Err(src, "head_dim and global_head_dim must be even (rotate-half rotary)");
  }
  bool has_sliding = false;
  for (LayerType t : c.layer_types) has_sliding |= t == LayerType::kSliding;
  if (has_sliding && c.sliding_window <= 0) {
    return Err(src, "\"sliding_window\" must be positive when there are sliding layers");
  }
  // A sliding layer's cache is a ring of sliding_window rows, allocated whole on its first token.
  if (c.sliding_window < 0 || c.sliding_window > c.max_position_embeddings) {
    return Err(src, absl::StrCat("\"sliding_window\" = ", c.sliding_window, " is outside [0, max_position_embeddings = ",
                                 c.max_position_embeddings, "]"));
  }
  for (const RopeConfig* r : {&c.rope_sliding, &c.rope_full}) {
    if (!(r->theta > 0) || !std::isfinite(r->theta)) return Err(src, "rope_theta must be positive");
    if (!(r->partial_rotary_factor > 0 && r->partial_rotary_factor <= 1)) {
      return Err(src, "partial_rotary_factor must be in (0, 1]");
    }
  }
  if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps)) return Err(src, "\"rms_norm_eps\" must be positive");
  if (!(c.final_logit_softcapping >= 0) || !std::isfinite(c.final_logit_softcapping)) {
    return Err(src, "\"final_logit_softcapping\" must be finite and >= 0");
  }
  for (auto [key, id] : {std::pair{"bos_token_id", c.bos_token_id}, std::pair{"eos_token_id", c.eos_token_id}}) {
    if (id < 0 || id >= c.vocab_size) {
      return Err(src, absl::StrCat("\"", key, "\" = ", id, " is outside the vocabulary"));
    }
  }
  return absl::OkStatus();
}

// vision_config / audio_config and the soft-token ids of the nested unified layout (absent: text only).
absl::Status ParseMultimodal(const json& root, ModelConfig* c, const std::string& src) {
  for (const char* key : {"vision_config", "audio_config"}) {
    auto it = root.find(key);
    if (it == root.end() || it->is_null()) continue;
    if (!it->is_object()) return Err(src, absl::StrCat("\"", key, "\" must be an object"));
  }
  if (auto it = root.find("vision_config"); it != root.end() && it->is_object()) {
    VisionConfig& v = c->vision;
    v.present = true;
    for (auto [key, dst, hi] : std::initializer_list<std::tuple<const char*, int64_t*, int64_t>>{
             {"model_patch_size", &v.model_patch_size, 1024},
             {"num_soft_tokens", &v.num_soft_tokens, 1 << 16},
             {"mm_posemb_size", &v.posemb_size, 1 << 16}}) {
      if (auto st = GetInt(*it, key, false, dst, src); !st.ok()) return st;
      if (auto st = CheckRange(key, *dst, 1, hi, src); !st.ok()) return st;
    }
    if (auto st = GetDouble(*it, "rms_norm_eps", &v.rms_norm_eps, src); !st.ok()) return st;
    if (!(v.rms_norm_eps > 0) || !std::isfinite(v.rms_norm_eps)) {
      return Err(src, "\"vision_config.rms_norm_eps\" must be positive");
    }
  }
  if (auto it = root.find("audio_config"); it != root.end() && it->is_object()) {
    AudioConfig& a = c->audio;
    a.present = true;
    if (auto st = GetInt(*it, "audio_samples_per_token", false, &a.samples_per_token, src); !st.ok()) return st;
    if (auto st = CheckRange("audio_samples_per_token", a.samples_per_token, 1, 1 << 16, src); !st.ok()) return st;
    int64_t embed = a.samples_per_token;
    if (auto st = GetInt(*it, "audio_embed_dim", false, &embed, src); !st.ok()) return st;
    // The projection takes one frame of samples as it is.
    if (embed != a.samples_per_token) {
      return Err(src, absl::StrCat("\"audio_embed_dim\" (", embed, ") must equal \"audio_samples_per_token\" (",
                                   a.samples_per_token, ")"));
    }
    if (auto st = GetDouble(*it, "rms_norm_eps", &a.rms_norm_eps, src); !st.ok()) return st;
    if (!(a.rms_norm_eps > 0) || !std::isfinite(a.rms_norm_eps)) {
      return Err(src, "\"audio_config.rms_norm_eps\" must be positive");
    }
  }
  MultimodalTokenIds& ids = c->mm_ids;
  for (auto [key, dst] : {std::pair{"image_token_id", &ids.image}, std::pair{"boi_token_id", &ids.boi},
                          std::pair{"eoi_token_id", &ids.eoi}, std::pair{"audio_token_id", &ids.audio},
                          std::pair{"boa_token_id", &ids.boa}, std::pair{"eoa_token_index", &ids.eoa}}) {
    int64_t v = *dst;
    if (auto st = GetInt(root, key, false, &v, src); !st.ok()) return st;
    if (v < 0 || v > INT32_MAX) return Err(src, absl::StrCat("\"", key, "\" = ", v, " is outside the int32 range"));
    *dst = static_cast<int32_t>(v);
  }
  if (!c->vision.present && !c->audio.present) return absl::OkStatus();
  for (int32_t id : {ids.image, ids.boi, ids.eoi, ids.audio, ids.boa, ids.eoa}) {
    if (id >= c->vocab_size) {
      return Err(src, absl::StrCat("soft-token id ", id, " is outside the vocabulary of ", c->vocab_size,
                                   " (a checkpoint with image or audio input needs them)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

const char* LayerTypeName(LayerType t) { return t == LayerType::kFull ? "full_attention" : "sliding_attention"; }

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& source) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return Err(source, "not a valid JSON object");
  ModelConfig c;
  const json* tc = &root;
  if (auto it = root.find("text_config"); it != root.end()) {
    if (!it->is_object()) return Err(source, "\"text_config\" must be an object");
    tc = &*it;
  }
  std::string mt;
  if (auto st = GetString(*tc, "model_type", "model_type", "", &mt, source); !st.ok()) return st;
  if (!mt.empty() && mt.rfind("gemma", 0) != 0) {
    return Err(source, absl::StrCat("\"model_type\" = \"", mt, "\" is not a Gemma text model"));
  }
  if (auto st = RejectUnsupported(*tc, source); !st.ok()) return st;

  int64_t layers = 0, heads = 0, hd = 0, kv = 0, window = 0, maxpos = 131072;
  if (auto st = GetInt(*tc, "hidden_size", true, &c.hidden_size, source); !st.ok()) return st;
  if (auto st = GetInt(*tc, "intermediate_size", true, &c.intermediate_size, source); !st.ok()) return st;
  if (auto st = GetInt(*tc, "vocab_size", true, &c.vocab_size, source); !st.ok()) return st;
  if (auto st = GetInt(*tc, "num_hidden_layers", true, &layers, source); !st.ok()) return st;
  if (auto st = GetInt(*tc, "num_attention_heads", true, &heads, source); !st.ok()) return st;
  if (auto st = GetInt(*tc, "head_dim", true, &hd, source); !st.ok()) return st;
  if (auto st = GetInt(*tc, "num_key_value_heads", true, &kv, source); !st.ok()) return st;
  int64_t ghd = hd, gkv = kv;  // full layers default to the sliding layers' shape
  if (auto st = GetInt(*tc, "global_head_dim", false, &ghd, source); !st.ok()) return st;
  if (auto st = GetInt(*tc, "num_global_key_value_heads", false, &gkv, source); !st.ok()) return st;
  if (auto st = GetInt(*tc, "sliding_window", false, &window, source); !st.ok()) return st;
  if (auto st = GetInt(*tc, "max_position_embeddings", false, &maxpos, source); !st.ok()) return st;
  // Range-checked before the narrowing to int below (which would wrap 2^32 + 4 to 4).
  for (auto [key, v, hi] : std::initializer_list<std::tuple<const char*, int64_t, int64_t>>{
           {"num_hidden_layers", layers, kMaxLayers},
           {"num_attention_heads", heads, kMaxHeads},
           {"head_dim", hd, kMaxHeadDim},
           {"num_key_value_heads", kv, kMaxHeads},
           {"global_head_dim", ghd, kMaxHeadDim},
           {"num_global_key_value_heads", gkv, kMaxHeads}}) {
    if (auto st = CheckRange(key, v, 1, hi, source); !st.ok()) return st;
  }
  c.num_layers = static_cast<int>(layers);
  c.num_heads = static_cast<int>(heads);
  c.head_dim = static_cast<int>(hd);
  c.num_kv_heads = static_cast<int>(kv);
  c.global_head_dim = static_cast<int>(ghd);
  c.num_global_kv_heads = static_cast<int>(gkv);
  c.sliding_window = window;
  c.max_position_embeddings = maxpos;
  if (auto it = tc->find("attention_k_eq_v"); it != tc->end() && !it->is_null()) {
    if (!it->is_boolean()) return Err(source, "key \"attention_k_eq_v\" must be a boolean");
    c.k_eq_v = it->get<bool>();
  }
  if (auto st = ParseLayerTypes(*tc, &c, source); !st.ok()) return st;
  if (auto st = ParseRope(*tc, &c, source); !st.ok()) return st;
  if (auto st = GetDouble(*tc, "rms_norm_eps", &c.rms_norm_eps, source); !st.ok()) return st;
  if (auto st = GetDouble(*tc, "final_logit_softcapping", &c.final_logit_softcapping, source); !st.ok()) return st;
  int64_t id = 0;
  for (auto [key, dst] : {std::pair{"bos_token_id", &c.bos_token_id}, std::pair{"eos_token_id", &c.eos_token_id},
                          std::pair{"pad_token_id", &c.pad_token_id}}) {
    const json* holder = tc->contains(key) ? tc : &root;
    auto it = holder->find(key);
    if (it == holder->end() || it->is_null()) continue;
    // eos may be a list; the first entry is the model's own end-of-sequence id.
    const json& v = it->is_array() && !it->empty() ? (*it)[0] : *it;
    if (!v.is_number_integer()) return Err(source, absl::StrCat("key \"", key, "\" must be an integer"));
    // Checked before the narrowing to int32 (Validate then checks bos and eos against the vocabulary).
    if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(INT32_MAX)
                               : (v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)) {
      return Err(source, absl::StrCat("key \"", key, "\" = ", v.dump(), " is outside the int32 range"));
    }
    id = v.get<int64_t>();
    *dst = static_cast<int32_t>(id);
  }
  if (auto st = Validate(c, source); !st.ok()) return st;
  if (auto st = ParseCheckpointQuantization(root, source, &c.quantization); !st.ok()) return st;
  if (tc != &root) {
    if (auto st = ParseMultimodal(root, &c, source); !st.ok()) return st;
  }
  return c;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  std::string path = model_dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open model config"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseModelConfig(ss.str(), path);
}

}  // namespace layerpipe
