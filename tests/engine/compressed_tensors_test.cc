// Checkpoints quantized ahead of time (compressed-tensors w4a16, Google's QAT layout): they load as shipped,
// to exactly the int4 weights `--quantize int4` makes of the same bf16 values, and every scheme layerpipe
// does not serve is refused naming the field, or the tensor, and its value.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/engine.h"
#include "engine/model/bf16.h"
#include "engine/model/compressed_tensors.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "nlohmann/json.hpp"
#include "tests/engine/test_util.h"

namespace layerpipe {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

RandomCheckpointOptions Model(bool w4a16) {
  auto o = testing_util::SmallModel();
  o.shards = 1;
  o.w4a16 = w4a16;
  return o;
}

json ReadConfig(const std::string& dir) {
  std::ifstream in(dir + "/config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

void WriteConfig(const std::string& dir, const json& config) {
  std::ofstream(dir + "/config.json", std::ios::trunc) << config.dump(2);
}

// Rewrites the checkpoint's one file (testing_util::RewriteTensors).
void Rewrite(const std::string& dir, const std::function<bool(TensorBlob&)>& edit,
             std::vector<TensorBlob> add = {}) {
  testing_util::RewriteTensors(dir + "/model.safetensors", edit, std::move(add));
}

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadAll(const std::string& dir, WeightFormat quantize = WeightFormat::kBf16) {
  auto c = LoadModelConfig(dir);
  if (!c.ok()) return c.status();
  WeightLoadOptions options;
  options.quantize = quantize;
  return ModelWeights::Load(dir, *c, {0, c->num_layers, true, true}, options);
}

void ExpectMentions(const absl::Status& st, std::initializer_list<std::string> needles) {
  ASSERT_FALSE(st.ok()) << "expected an error mentioning " << *needles.begin();
  for (const std::string& n : needles) {
    EXPECT_NE(std::string(st.message()).find(n), std::string::npos) << "'" << n << "' not in: " << st;
  }
}

std::vector<const WeightMatrix*> LayerMatrices(const ModelWeights& w, int l) {
  const LayerWeights& L = w.layer(l);
  std::vector<const WeightMatrix*> out;
  for (const WeightMatrix* m : {&L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj, &L.gate_proj, &L.up_proj, &L.down_proj}) {
    if (!m->empty()) out.push_back(m);
  }
  return out;
}

TEST(CompressedTensorsTest, ShipsTheWeightsQuantizeInt4MakesOfItsBf16Twin) {
  const std::string qat = testing_util::MakeCheckpoint("ct_qat", Model(true));
  const std::string bf16 = testing_util::MakeCheckpoint("ct_bf16", Model(false));
  EXPECT_TRUE(fs::exists(qat + "/model.safetensors"));
  auto shipped = LoadAll(qat);
  auto made = LoadAll(bf16, WeightFormat::kInt4);
  ASSERT_TRUE(shipped.ok()) << shipped.status();
  ASSERT_TRUE(made.ok()) << made.status();
  for (int l = 0; l < (*shipped)->config().num_layers; ++l) {
    auto a = LayerMatrices(**shipped, l), b = LayerMatrices(**made, l);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      SCOPED_TRACE(absl::StrCat("layer ", l, " matrix ", i, " ", a[i]->Describe()));
      EXPECT_EQ(a[i]->format, WeightFormat::kInt4);
      ASSERT_EQ(a[i]->bytes(), b[i]->bytes());
      EXPECT_EQ(0, std::memcmp(a[i]->data, b[i]->data, a[i]->bytes()));
    }
    EXPECT_EQ((*shipped)->LayerMatrixBytes(l), (*made)->LayerMatrixBytes(l));
  }
  // The embedding (tied head) stays bf16, as the config's ignore list says.
  EXPECT_EQ((*shipped)->embed_tokens().format, WeightFormat::kBf16);

  // And so the engine's logits are the same bits, in both precisions.
  const std::vector<int32_t> ids = {2, 10, 20, 30, 40, 50, 60, 70, 80, 90};
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    EngineOptions as_shipped, quantized;
    as_shipped.precision = quantized.precision = p;
    quantized.quantize = WeightFormat::kInt4;
    auto ea = Engine::Load(qat, as_shipped);
    auto eb = Engine::Load(bf16, quantized);
    ASSERT_TRUE(ea.ok() && eb.ok()) << ea.status() << eb.status();
    auto la = (*ea)->Score(ids);
    auto lb = (*eb)->Score(ids);
    ASSERT_TRUE(la.ok() && lb.ok());
    ASSERT_EQ(la->size(), lb->size());
    EXPECT_EQ(0, std::memcmp(la->data(), lb->data(), la->size() * sizeof(float)));
  }
}

TEST(CompressedTensorsTest, FlatAndShardedCheckpointsLoad) {
  auto flat = Model(true);
  flat.flat_config = true;
  EXPECT_TRUE(LoadAll(testing_util::MakeCheckpoint("ct_flat", flat)).ok());
  auto sharded = Model(true);
  sharded.shards = 3;
  const std::string dir = testing_util::MakeCheckpoint("ct_sharded", sharded);
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors.index.json"));
  auto w = LoadAll(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->get()->layer(1).q_proj.format, WeightFormat::kInt4);
}

TEST(CompressedTensorsTest, RefusesToRequantize) {
  const std::string dir = testing_util::MakeCheckpoint("ct_requant", Model(true));
  for (WeightFormat f : {WeightFormat::kInt8, WeightFormat::kInt4}) {
    ExpectMentions(LoadAll(dir, f).status(), {"already quantized", "--quantize none"});
  }
}

// A group size must divide every quantized Linear's input size: 64 does not divide this model's 96.
TEST(CompressedTensorsTest, RefusesAGroupSizeThatDoesNotDivideK) {
  const std::string dir = testing_util::MakeCheckpoint("ct_g64", Model(true));
  json config = ReadConfig(dir);
  config["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] = 64;
  WriteConfig(dir, config);
  auto c = LoadModelConfig(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->quantization.group_size, 64);
  ExpectMentions(LoadAll(dir).status(), {"q_proj.weight_packed", "groups of 64", "do not divide"});
}

// A group of 64 values has one scale in the checkpoint; the engine repeats it for each 32 of them.
TEST(CompressedTensorsTest, RepeatsScalesOfGroupsOf64) {
  auto o = Model(true);
  o.hidden = 128;  // every Linear's input size (128, 192, heads x head dims) divides by 64
  o.intermediate = 192;
  const std::string ref_dir = testing_util::MakeCheckpoint("ct_r32", o);
  const std::string dir = testing_util::MakeCheckpoint("ct_r64", o);
  json config = ReadConfig(dir);
  config["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] = 64;
  WriteConfig(dir, config);
  // Keep the scale of each even group of 32 as the scale of the group of 64.
  Rewrite(dir, [](TensorBlob& b) {
    if (b.name.size() < kScaleSuffix.size() ||
        b.name.substr(b.name.size() - kScaleSuffix.size()) != kScaleSuffix) {
      return true;
    }
    const int64_t rows = b.shape[0], groups = b.shape[1];
    std::vector<uint8_t> out(static_cast<size_t>(rows * groups / 2 * 2));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t g = 0; g < groups / 2; ++g) std::memcpy(&out[(r * groups / 2 + g) * 2], &b.bytes[(r * groups + 2 * g) * 2], 2);
    }
    b.shape[1] = groups / 2;
    b.bytes = std::move(out);
    return true;
  });
  auto ref = LoadAll(ref_dir);
  auto w = LoadAll(dir);
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_TRUE(w.ok()) << w.status();
  for (int l = 0; l < (*w)->config().num_layers; ++l) {
    auto a = LayerMatrices(**w, l), b = LayerMatrices(**ref, l);
    for (size_t i = 0; i < a.size(); ++i) {
      for (int64_t r = 0; r < a[i]->rows; ++r) {
        for (int64_t col = 0; col < a[i]->cols; ++col) {
          ASSERT_EQ(a[i]->QuantizedValue(r, col), b[i]->QuantizedValue(r, col));
          ASSERT_EQ(a[i]->ScaleOf(r, col), b[i]->ScaleOf(r, col / 64 * 64)) << "layer " << l << " row " << r << " col " << col;
        }
      }
    }
  }
}

// Each scheme layerpipe does not serve, refused when the config is read, naming the field and value.
TEST(CompressedTensorsTest, RefusesEveryOtherSchemeByField) {
  const std::string dir = testing_util::MakeCheckpoint("ct_config", Model(true));
  const json base = ReadConfig(dir);
  struct Case {
    std::string pointer;
    json value;
    std::vector<std::string> mentions;
  };
  const std::string w = "/quantization_config/config_groups/group_0/weights/";
  const std::vector<Case> cases = {
      {"/quantization_config/quant_method", "gptq", {"quant_method", "gptq"}},
      {"/quantization_config/format", "float-quantized", {"quantization_config.format", "float-quantized"}},
      {"/quantization_config/config_groups/group_0/format", "naive-quantized",
       {"config_groups.group_0.format", "naive-quantized"}},
      {w + "num_bits", 8, {"weights.num_bits", "8"}},
      {w + "type", "float", {"weights.type", "float"}},
      {w + "symmetric", false, {"weights.symmetric", "false", "zero points"}},
      {w + "strategy", "channel", {"weights.strategy", "channel"}},
      {w + "group_size", 48, {"weights.group_size", "48", "multiple of 32"}},
      {w + "group_size", 0, {"weights.group_size", "0"}},
      {w + "actorder", "group", {"weights.actorder", "group"}},
      {w + "dynamic", true, {"weights.dynamic", "true"}},
      {"/quantization_config/config_groups/group_0/input_activations", json{{"num_bits", 8}, {"type", "int"}},
       {"config_groups.group_0.input_activations", "quantized activations"}},
      {"/quantization_config/kv_cache_scheme", json{{"num_bits", 8}}, {"kv_cache_scheme"}},
      {"/quantization_config/quantization_status", "frozen", {"quantization_status", "frozen"}},
      {"/quantization_config/config_groups", json::object(), {"config_groups"}},
      {"/quantization_config/ignore", "lm_head", {"ignore", "lm_head"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pointer);
    json config = base;
    config[json::json_pointer(c.pointer)] = c.value;
    auto parsed = ParseModelConfig(config.dump(), "config.json");
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    ExpectMentions(parsed.status(), {"config.json", "quantization_config"});
    for (const std::string& m : c.mentions) ExpectMentions(parsed.status(), {m});
  }
  // Missing required fields are named too.
  for (const std::string& key : {"num_bits", "symmetric", "strategy", "group_size"}) {
    json config = base;
    config["quantization_config"]["config_groups"]["group_0"]["weights"].erase(key);
    ExpectMentions(ParseModelConfig(config.dump(), "config.json").status(), {"weights." + key});
  }
  // The config as written parses, and one without quantization_config is as before.
  auto ok = ParseModelConfig(base.dump(), "config.json");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->quantization.packed);
  EXPECT_EQ(ok->quantization.group_size, 32);
  EXPECT_FALSE(ok->quantization.ignore.empty());
  json plain = base;
  plain.erase("quantization_config");
  auto none = ParseModelConfig(plain.dump(), "config.json");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->quantization.packed);
}

// Broken or unsupported tensors, refused at load naming the tensor.
TEST(CompressedTensorsTest, RefusesBrokenPackedTensorsByName) {
  const std::string q0 = "model.language_model.layers.0.self_attn.q_proj";
  auto edit_case = [&](const std::string& name, const std::function<bool(TensorBlob&)>& edit,
                       std::vector<TensorBlob> add = {}) {
    const std::string dir = testing_util::MakeCheckpoint("ct_" + name, Model(true));
    Rewrite(dir, edit, std::move(add));
    return LoadAll(dir).status();
  };
  ExpectMentions(edit_case("shape", [&](TensorBlob& b) {
                   if (b.name == q0 + ".weight_shape") std::memset(b.bytes.data(), 0, 8);
                   return true;
                 }),
                 {q0 + ".weight_shape", "says [0,96]", "needs [128,96]"});
  ExpectMentions(edit_case("scale_shape", [&](TensorBlob& b) {
                   if (b.name == q0 + ".weight_scale") {
                     b.shape = {b.shape[0] * b.shape[1]};
                   }
                   return true;
                 }),
                 {q0 + ".weight_scale", "has shape [384]", "needs [128,3]"});
  ExpectMentions(edit_case("packed_dtype", [&](TensorBlob& b) {
                   if (b.name == q0 + ".weight_packed") {
                     b.dtype = DType::kF32;
                   }
                   return true;
                 }),
                 {q0 + ".weight_packed", "F32", "I32"});
  ExpectMentions(edit_case("no_scale", [&](TensorBlob& b) { return b.name != q0 + ".weight_scale"; }),
                 {q0 + ".weight_scale", "missing"});
  TensorBlob zp{q0 + ".weight_zero_point", DType::kI32, {128, 3}, std::vector<uint8_t>(128 * 3 * 4)};
  ExpectMentions(edit_case("zero_point", [](TensorBlob&) { return true; }, {zp}),
                 {q0 + ".weight_zero_point", "zero points"});
  // A float32 scale that is not a bf16 value would change the weights; one that is loads the same.
  auto f32_scales = [&](bool exact) {
    return [&, exact](TensorBlob& b) {
      if (b.name != q0 + ".weight_scale") return true;
      std::vector<uint8_t> out(b.bytes.size() * 2);
      for (size_t i = 0; i < b.bytes.size() / 2; ++i) {
        uint16_t bits;
        std::memcpy(&bits, &b.bytes[2 * i], 2);
        float f = Bf16ToF32(bits);
        if (!exact && i == 5) f = std::nextafter(f, 1.0f);
        std::memcpy(&out[4 * i], &f, 4);
      }
      b.dtype = DType::kF32;
      b.bytes = std::move(out);
      return true;
    };
  };
  ExpectMentions(edit_case("f32_inexact", f32_scales(false)), {q0 + ".weight_scale", "at 5", "not exactly a bf16"});
  EXPECT_TRUE(edit_case("f32_exact", f32_scales(true)).ok());

  // Packed tensors without a quantization_config saying what they are.
  const std::string dir = testing_util::MakeCheckpoint("ct_noconfig", Model(true));
  json config = ReadConfig(dir);
  config.erase("quantization_config");
  WriteConfig(dir, config);
  ExpectMentions(LoadAll(dir).status(), {"weight_packed", "no quantization_config"});
}

TEST(CompressedTensorsTest, MakeCheckpointFlagNamesItsValues) {
  RandomCheckpointOptions o;
  EXPECT_TRUE(ParseCheckpointQuantizationFlag("w4a16", &o).ok());
  EXPECT_TRUE(o.w4a16);
  EXPECT_TRUE(ParseCheckpointQuantizationFlag("none", &o).ok());
  EXPECT_FALSE(o.w4a16);
  ExpectMentions(ParseCheckpointQuantizationFlag("w8a8", &o), {"--quantization", "w8a8", "none or w4a16"});
  auto bad = Model(true);
  bad.hidden = 100;
  EXPECT_FALSE(WriteRandomCheckpoint(testing_util::TempDir("ct_bad"), bad).ok());
}

}  // namespace
}  // namespace layerpipe
