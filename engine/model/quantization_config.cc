#include "engine/model/quantization_config.h"

#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/json_shown.h"
#include "engine/model/weight_matrix.h"  // kQuantGroup (a constant: nothing to link)
#include "nlohmann/json.hpp"

namespace layerpipe {
namespace {

using json = nlohmann::json;

absl::Status Refuse(const std::string& source, const std::string& field, const json& value, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": quantization_config.", field, " = ", Shown(value), ": ", std::string(why)));
}

// A key that must be absent, null or false (features layerpipe does not serve).
absl::Status MustBeOff(const json& j, const std::string& path, const char* key, const std::string& source,
                       std::string_view why) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null() || (it->is_boolean() && !it->get<bool>())) return absl::OkStatus();
  if (it->is_object() && it->empty()) return absl::OkStatus();
  return Refuse(source, path + key, *it, why);
}

// A string key that must equal `want` (absent: `absent_ok` says whether that is the default).
absl::Status MustEqual(const json& j, const std::string& path, const char* key, std::string_view want,
                       bool absent_ok, const std::string& source, std::string_view why) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (absent_ok) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": quantization_config.", path, key, " is missing (layerpipe serves \"", std::string(want),
                     "\")"));
  }
  if (it->is_string() && it->get<std::string>() == want) return absl::OkStatus();
  return Refuse(source, path + key, *it, why);
}

// One config group's weights: symmetric int4 in groups, nothing else.
absl::Status ParseWeightArgs(const json& w, const std::string& path, const std::string& source, int64_t* group_size) {
  if (!w.is_object()) return Refuse(source, path.substr(0, path.size() - 1), w, "must be an object");
  auto bits = w.find("num_bits");
  if (bits == w.end() || !bits->is_number_integer() || bits->get<int64_t>() != 4) {
    return Refuse(source, path + "num_bits", bits == w.end() ? json() : *bits,
                  "layerpipe serves 4-bit packed weights (w4a16) only");
  }
  if (auto st = MustEqual(w, path, "type", "int", true, source, "layerpipe serves integer weights only (not FP8/FP4)");
      !st.ok()) {
    return st;
  }
  auto sym = w.find("symmetric");
  if (sym == w.end() || !sym->is_boolean() || !sym->get<bool>()) {
    return Refuse(source, path + "symmetric", sym == w.end() ? json() : *sym,
                  "asymmetric weights (zero points) are not served");
  }
  if (auto st = MustEqual(w, path, "strategy", "group", false, source,
                          "layerpipe serves per-group scales along the input dimension only");
      !st.ok()) {
    return st;
  }
  auto gs = w.find("group_size");
  if (gs == w.end() || !gs->is_number_integer() || gs->get<int64_t>() <= 0 ||
      gs->get<int64_t>() % kQuantGroup != 0) {
    return Refuse(source, path + "group_size", gs == w.end() ? json() : *gs,
                  absl::StrCat("layerpipe serves groups of a positive multiple of ", kQuantGroup, " values"));
  }
  *group_size = gs->get<int64_t>();
  for (const char* key : {"actorder", "g_idx"}) {
    if (auto st = MustBeOff(w, path, key, source, "activation-ordered groups (g_idx) are not served"); !st.ok()) {
      return st;
    }
  }
  if (auto st = MustBeOff(w, path, "dynamic", source, "weights must be quantized ahead of time"); !st.ok()) return st;
  return MustBeOff(w, path, "block_structure", source, "block-wise scales are not served");
}

}  // namespace

std::string CheckpointQuantization::Describe() const {
  if (!packed) return "none";
  return absl::StrCat("compressed-tensors int4 in groups of ", group_size);
}

absl::Status ParseCheckpointQuantization(const json& root, const std::string& source, CheckpointQuantization* out) {
  *out = CheckpointQuantization{};
  auto it = root.find("quantization_config");
  if (it == root.end() || it->is_null()) return absl::OkStatus();
  const json& q = *it;
  if (!q.is_object()) return Refuse(source, "", q, "must be an object");
  if (auto st = MustEqual(q, "", "quant_method", "compressed-tensors", false, source,
                          "layerpipe loads compressed-tensors checkpoints (Google's QAT w4a16 release) as shipped; "
                          "serve the bf16 checkpoint, with --quantize int8|int4 if it should be smaller");
      !st.ok()) {
    return st;
  }
  if (auto st = MustEqual(q, "", "format", "pack-quantized", true, source,
                          "layerpipe serves int4 weights packed into int32 words (pack-quantized) only");
      !st.ok()) {
    return st;
  }
  if (auto st = MustEqual(q, "", "quantization_status", "compressed", true, source,
                          "the checkpoint's weights must be stored compressed");
      !st.ok()) {
    return st;
  }
  if (auto st = MustBeOff(q, "", "kv_cache_scheme", source, "a quantized KV cache is not served"); !st.ok()) return st;
  if (auto st = MustBeOff(q, "", "sparsity_config", source, "sparse checkpoints are not served"); !st.ok()) return st;
  if (auto st = MustBeOff(q, "", "transform_config", source, "transformed (rotated) weights are not served");
      !st.ok()) {
    return st;
  }
  auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->empty()) {
    return Refuse(source, "config_groups", groups == q.end() ? json() : *groups,
                  "must name at least one group of quantized Linear weights");
  }
  for (const auto& group : groups->items()) {
    const std::string path = absl::StrCat("config_groups.", group.key(), ".");
    const json& g = group.value();
    if (!g.is_object()) return Refuse(source, path.substr(0, path.size() - 1), g, "must be an object");
    if (auto st = MustEqual(g, path, "format", "pack-quantized", true, source,
                            "layerpipe serves int4 weights packed into int32 words (pack-quantized) only");
        !st.ok()) {
      return st;
    }
    for (const char* key : {"input_activations", "output_activations"}) {
      if (auto st = MustBeOff(g, path, key, source, "quantized activations are not served (w4a16 only)"); !st.ok()) {
        return st;
      }
    }
    auto w = g.find("weights");
    if (w == g.end() || w->is_null()) return Refuse(source, path + "weights", json(), "must describe the weights");
    int64_t group_size = 0;
    if (auto st = ParseWeightArgs(*w, path + "weights.", source, &group_size); !st.ok()) return st;
    if (out->group_size != 0 && out->group_size != group_size) {
      return Refuse(source, path + "weights.group_size", group_size,
                    absl::StrCat("every config group must share one group size (another has ", out->group_size, ")"));
    }
    out->group_size = group_size;
  }
  if (auto ig = q.find("ignore"); ig != q.end() && !ig->is_null()) {
    if (!ig->is_array()) return Refuse(source, "ignore", *ig, "must be a list of module names");
    for (const json& name : *ig) {
      if (!name.is_string()) return Refuse(source, "ignore", *ig, "must be a list of module names");
      out->ignore.push_back(name.get<std::string>());
    }
  }
  out->packed = true;
  return absl::OkStatus();
}

}  // namespace layerpipe
