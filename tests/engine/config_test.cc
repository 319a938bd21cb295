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

TEST(ConfigTest, RejectsMalformedJson) {
  auto c = ParseModelConfig("{\"hidden_size\": ", "broken.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("broken.json"), std::string::npos);
}

}  // namespace
}  // namespace layerpipe
