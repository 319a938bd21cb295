#include "engine/model/config.h"

#include <gtest/gtest.h>

#include "nlohmann/json.hpp"

namespace layerpipe {
namespace {

using json = nlohmann::json;

json Text12B() {
  json lt = json::array();
  for (int i = 0; i < 48; ++i) lt.push_back(i % 6 == 5 ? "full_attention" : "sliding_attention");
  return {{"model_type", "gemma4_unified_text"},
          {"hidden_size", 3840},
          {"intermediate_size", 15360},
          {"vocab_size", 262144},
          {"num_hidden_layers", 48},
          {"num_attention_heads", 16},
          {"head_dim", 256},
          {"num_key_value_heads", 8},
          {"global_head_dim", 512},
          {"num_global_key_value_heads", 1},
          {"layer_types", lt},
          {"attention_k_eq_v", true},
          {"sliding_window", 1024},
          {"rope_parameters",
           {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
            {"full_attention",
             {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1000000.0}}}}},
          {"rms_norm_eps", 1e-6},
          {"final_logit_softcapping", 30.0},
          {"max_position_embeddings", 262144},
          {"num_kv_shared_layers", 0},
          {"enable_moe_block", false},
          {"hidden_size_per_layer_input", 0}};
}

json Nested(json tc) {
  return {{"architectures", {"Gemma4UnifiedForConditionalGeneration"}},
          {"model_type", "gemma4_unified"},
          {"text_config", tc},
          {"image_token_id", 258880}};
}

// HF gives a full layer num_global_key_value_heads KV heads only with attention_k_eq_v; without it the
// full layer has num_key_value_heads (and a v_proj), whatever num_global_key_value_heads says.
TEST(ConfigTest, FullLayersTakeTheGlobalKvHeadCountOnlyWithKEqV) {
  json tc = Text12B();
  tc["attention_k_eq_v"] = false;
  tc["num_global_key_value_heads"] = 3;  // does not even divide the 16 heads: not used
  auto c = ParseModelConfig(Nested(tc).dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->KvHeads(5), 8);
  EXPECT_EQ(c->FullKvHeads(), 8);
  EXPECT_EQ(c->HeadDim(5), 512);
  EXPECT_TRUE(c->HasVProj(5));
  tc["attention_k_eq_v"] = true;
  auto keqv = ParseModelConfig(Nested(tc).dump(), "config.json");
  ASSERT_FALSE(keqv.ok());
  EXPECT_NE(std::string(keqv.status().message()).find("num_global_key_value_heads (3)"), std::string::npos)
      << keqv.status();
}

TEST(ConfigTest, LoadsThe12BNestedConfig) {
  auto c = ParseModelConfig(Nested(Text12B()).dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_layers, 48);
  EXPECT_EQ(c->hidden_size, 3840);
  EXPECT_EQ(c->layer_types[5], LayerType::kFull);
  EXPECT_EQ(c->layer_types[4], LayerType::kSliding);
  EXPECT_EQ(c->layer_types[47], LayerType::kFull);
  EXPECT_EQ(c->HeadDim(5), 512);
  EXPECT_EQ(c->KvHeads(5), 1);
  EXPECT_EQ(c->HeadDim(0), 256);
  EXPECT_EQ(c->KvHeads(0), 8);
  EXPECT_TRUE(c->k_eq_v);
  EXPECT_FALSE(c->HasVProj(5));
  EXPECT_TRUE(c->HasVProj(0));
  EXPECT_DOUBLE_EQ(c->rope_full.theta, 1e6);
  EXPECT_DOUBLE_EQ(c->rope_full.partial_rotary_factor, 0.25);
  EXPECT_DOUBLE_EQ(c->rope_sliding.theta, 1e4);
  EXPECT_DOUBLE_EQ(c->rope_sliding.partial_rotary_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->final_logit_softcapping, 30.0);
  EXPECT_EQ(c->sliding_window, 1024);
}

TEST(ConfigTest, ReadsTheVisionAndAudioSections) {
  json root = Nested(Text12B());
  root["vision_config"] = {{"patch_size", 16}, {"pooling_kernel_size", 3}, {"model_patch_size", 48},
                           {"mm_posemb_size", 1120}, {"num_soft_tokens", 280}, {"rms_norm_eps", 1e-6}};
  root["audio_config"] = {{"audio_embed_dim", 640}, {"audio_samples_per_token", 640}, {"rms_norm_eps", 1e-6}};
  root["boi_token_id"] = 255999;
  root["eoa_token_index"] = 258883;
  auto c = ParseModelConfig(root.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->vision.present);
  EXPECT_EQ(c->vision.model_patch_size, 48);
  EXPECT_EQ(c->vision.patch_values(), 6912);
  EXPECT_EQ(c->vision.num_soft_tokens, 280);
  EXPECT_TRUE(c->audio.present);
  EXPECT_EQ(c->audio.samples_per_token, 640);
  EXPECT_EQ(c->mm_ids.image, 258880);
  EXPECT_EQ(c->mm_ids.eoa, 258883);
  // A text-only nested config and the flat form have neither.
  EXPECT_FALSE(ParseModelConfig(Nested(Text12B()).dump(), "c")->vision.present);
  EXPECT_FALSE(ParseModelConfig(Text12B().dump(), "c")->audio.present);
  // Errors name the key.
  json bad = root;
  bad["audio_config"]["audio_embed_dim"] = 320;
  EXPECT_NE(ParseModelConfig(bad.dump(), "c").status().message().find("\"audio_embed_dim\" (320) must equal"),
            std::string::npos);
  bad = root;
  bad["vision_config"]["model_patch_size"] = 0;
  EXPECT_NE(ParseModelConfig(bad.dump(), "c").status().message().find("\"model_patch_size\" must be positive"),
            std::string::npos);
  bad = root;
  bad["vision_config"] = "yes";
  EXPECT_NE(ParseModelConfig(bad.dump(), "c").status().message().find("\"vision_config\" must be an object"),
            std::string::npos);
  bad = root;
  bad["text_config"]["vocab_size"] = 1000;
  EXPECT_NE(ParseModelConfig(bad.dump(), "c").status().message().find("soft-token id 258880 is outside the vocabulary"),
            std::string::npos);
}

TEST(ConfigTest, LoadsFlatConfigWithGemma3StyleRopeKeys) {
  json tc = Text12B();
  tc.erase("rope_parameters");
  tc["rope_theta"] = 500000.0;
  tc["rope_local_base_freq"] = 20000.0;
  tc["partial_rotary_factor"] = 0.5;
  auto c = ParseModelConfig(tc.dump(), "flat.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope_full.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c->rope_full.partial_rotary_factor, 0.5);
  EXPECT_DOUBLE_EQ(c->rope_sliding.theta, 20000.0);
}

void ExpectError(const json& cfg, const std::string& needle) {
  auto c = ParseModelConfig(cfg.dump(), "cfg.json");
  ASSERT_FALSE(c.ok()) << "expected an error mentioning " << needle;
  EXPECT_NE(std::string(c.status().message()).find(needle), std::string::npos) << c.status();
  EXPECT_NE(std::string(c.status().message()).find("cfg.json"), std::string::npos) << c.status();
}

TEST(ConfigTest, RejectsBadLayerTypes) {
  json tc = Text12B();
  tc["layer_types"].erase(tc["layer_types"].size() - 1);
  ExpectError(tc, "layer_types");
  tc = Text12B();
  tc["layer_types"][3] = "chunked_attention";
  ExpectError(tc, "layer_types[3]");
}

TEST(ConfigTest, RejectsBadHeadSizes) {
  json tc = Text12B();
  tc["num_key_value_heads"] = 3;
  ExpectError(tc, "num_key_value_heads");
  tc = Text12B();
  tc["head_dim"] = 0;
  ExpectError(tc, "head_dim");
  tc = Text12B();
  tc["global_head_dim"] = 511;
  ExpectError(tc, "even");
  tc = Text12B();
  tc.erase("hidden_size");
  ExpectError(tc, "hidden_size");
  tc = Text12B();
  tc["attention_k_eq_v"] = "yes";
  ExpectError(tc, "attention_k_eq_v");
}

TEST(ConfigTest, RejectsUnsupportedFeaturesNamingTheKey) {
  json tc = Text12B();
  tc["num_kv_shared_layers"] = 20;
  ExpectError(tc, "num_kv_shared_layers");
  tc = Text12B();
  tc["enable_moe_block"] = true;
  ExpectError(tc, "enable_moe_block");
  tc = Text12B();
  tc["hidden_size_per_layer_input"] = 256;
  ExpectError(tc, "hidden_size_per_layer_input");
  tc = Text12B();
  tc["rope_parameters"]["full_attention"]["rope_type"] = "yarn";
  ExpectError(tc, "rope_type");
}

TEST(ConfigTest, RejectsNonStringTypesNamingTheKey) {
  // nlohmann's value() threw type_error.302 on these (tests/fuzz/crashes/model_config_fuzz/).
  json tc = Text12B();
  tc["model_type"] = 1;
  ExpectError(tc, "key \"model_type\" must be a string, got number 1");
  ExpectError(Nested(tc), "key \"model_type\" must be a string");
  tc = Text12B();
  tc["rope_parameters"]["full_attention"]["rope_type"] = json::array({"default"});
  ExpectError(tc, "key \"rope_parameters.full_attention.rope_type\" must be a string, got array");
  tc = Text12B();
  tc["rope_parameters"] = {{"rope_type", true}, {"rope_theta", 1e6}};
  ExpectError(tc, "key \"rope_parameters.rope_type\" must be a string, got boolean true");
  tc = Text12B();
  tc["model_type"] = json::array();
  for (int i = 0; i < 1000; ++i) tc["model_type"].push_back("gemma");
  auto c = ParseModelConfig(tc.dump(), "cfg.json");
  ASSERT_FALSE(c.ok());
  EXPECT_LT(c.status().message().size(), 200u) << "a long value is cut in the message";
  EXPECT_NE(std::string(c.status().message()).find("must be a string, got array of 1000 entries"), std::string::npos)
      << c.status();
  // Deeply nested: the message shows the type, not the (recursive) dump.
  std::string text = Text12B().dump();
  text.replace(text.find("\"gemma4_unified_text\""), std::string("\"gemma4_unified_text\"").size(),
               std::string(200000, '[') + std::string(200000, ']'));
  c = ParseModelConfig(text, "cfg.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("must be a string, got array of 1 entry"), std::string::npos)
      << c.status();
  tc = Text12B();
  tc["model_type"] = nullptr;  // null is the same as absent
  EXPECT_TRUE(ParseModelConfig(tc.dump(), "cfg.json").ok());
}

TEST(ConfigTest, RejectsHugeSizesNamingTheKey) {
  struct Case {
    const char* key;
    json value;
    const char* needle;
  };
  const Case cases[] = {
      // A ring of 2^40 rows would be allocated on a sliding layer's first token.
      {"sliding_window", int64_t{1} << 40,
       "\"sliding_window\" = 1099511627776 is outside [0, max_position_embeddings = 262144]"},
      {"sliding_window", 262145, "\"sliding_window\" = 262145 is outside [0, max_position_embeddings = 262144]"},
      {"sliding_window", -1, "\"sliding_window\" must be positive"},
      {"max_position_embeddings", int64_t{1} << 40,
       "\"max_position_embeddings\" = 1099511627776 exceeds the supported maximum of 16777216"},
      {"hidden_size", int64_t{1} << 40, "\"hidden_size\" = 1099511627776 exceeds the supported maximum of 1048576"},
      {"intermediate_size", int64_t{1} << 40, "\"intermediate_size\" = 1099511627776 exceeds the supported maximum"},
      {"vocab_size", int64_t{1} << 31, "\"vocab_size\" = 2147483648 exceeds the supported maximum of 16777216"},
      {"num_hidden_layers", 100000, "\"num_hidden_layers\" = 100000 exceeds the supported maximum of 4096"},
      // Each of these would wrap to a valid value (16, 256, 8) when narrowed to int.
      {"num_attention_heads", (int64_t{1} << 32) + 16, "\"num_attention_heads\" = 4294967312 exceeds the supported maximum"},
      {"head_dim", (int64_t{1} << 32) + 256, "\"head_dim\" = 4294967552 exceeds the supported maximum of 65536"},
      {"num_key_value_heads", (int64_t{1} << 32) + 8, "\"num_key_value_heads\" = 4294967304 exceeds"},
      {"global_head_dim", (int64_t{1} << 32) + 512, "\"global_head_dim\" = 4294967808 exceeds"},
      {"num_global_key_value_heads", -1, "\"num_global_key_value_heads\" must be positive, got -1"},
      // Above INT64_MAX: get<int64_t>() would make it negative.
      {"hidden_size", uint64_t{1} << 63, "key \"hidden_size\" = 9223372036854775808 is out of range"},
      // Narrowed to int32 they would be 2 and 1, inside the vocabulary.
      {"bos_token_id", (int64_t{1} << 32) + 2, "key \"bos_token_id\" = 4294967298 is outside the int32 range"},
      {"eos_token_id", json::array({(int64_t{1} << 32) + 1}), "key \"eos_token_id\" = 4294967297 is outside"},
      {"pad_token_id", int64_t{1} << 40, "key \"pad_token_id\" = 1099511627776 is outside the int32 range"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    json tc = Text12B();
    tc[c.key] = c.value;
    ExpectError(tc, c.needle);
    auto st = ParseModelConfig(tc.dump(), "cfg.json").status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  }
  // The bounds leave real configs alone: the 12B's window and context, and a window as long as the context.
  json tc = Text12B();
  tc["sliding_window"] = 262144;
  EXPECT_TRUE(ParseModelConfig(tc.dump(), "cfg.json").ok());
  tc["max_position_embeddings"] = 1 << 24;
  tc["pad_token_id"] = -1;
  EXPECT_TRUE(ParseModelConfig(tc.dump(), "cfg.json").ok());
}

TEST(ConfigTest, RejectsNumbersBeyondDouble) {
  // nlohmann refuses 1e999 (number overflow) rather than reading infinity; Validate also checks finiteness.
  std::string text = Text12B().dump();
  const std::string eps = "\"rms_norm_eps\":1e-06";
  ASSERT_NE(text.find(eps), std::string::npos) << text;
  auto c = ParseModelConfig(text.replace(text.find(eps), eps.size(), "\"rms_norm_eps\":1e999"), "cfg.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
}

TEST(ConfigTest, RejectsMalformedJson) {
  auto c = ParseModelConfig("{\"hidden_size\": ", "broken.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("broken.json"), std::string::npos);
}

}  // namespace
}  // namespace layerpipe
