// tokenizer.json fields of the wrong type or out of range: each is refused with an InvalidArgument that
// names the field (found by tests/fuzz/tokenizer_json_fuzz; the inputs it found are in
// tests/fuzz/crashes/tokenizer_json_fuzz/). Before, nlohmann's value()/get() threw type_error out of
// Tokenizer::FromJsonText, template ids outside the vocabulary came out of Encode, and a single large
// vocabulary id made the loader allocate gigabytes.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace layerpipe {
namespace {

using json = nlohmann::json;

// One token "a" (id 0) and a template that adds "x" from post_processor.special_tokens.
json Tiny() {
  return {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}}}, {"merges", json::array()}}},
          {"decoder", {{"type", "Fuse"}}},
          {"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"String", "a"}}}}},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", json::array({{{"SpecialToken", {{"id", "x"}}}}, {{"Sequence", {{"id", "A"}}}}})},
            {"special_tokens", {{"x", {{"ids", json::array({1})}}}}}}}};
}

absl::Status LoadStatus(const json& config) { return Tokenizer::FromJsonText(config.dump(), "tiny.json").status(); }

void ExpectInvalid(const json& config, const std::string& part) {
  const absl::Status st = LoadStatus(config);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find(part), std::string::npos) << "'" << st.message() << "' lacks '" << part << "'";
  EXPECT_NE(st.message().find("tiny.json"), std::string::npos) << st;
}

TEST(TokenizerJsonErrors, TheTinyTokenizerLoads) {
  auto tok = Tokenizer::FromJsonText(Tiny().dump(), "tiny.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->Encode("a", true), std::vector<int32_t>({1, 0}));
}

TEST(TokenizerJsonErrors, ModelTypeOfTheWrongType) {
  for (const json& v : {json(5), json::array({"BPE"}), json::object(), json(true)}) {
    json c = Tiny();
    c["model"]["type"] = v;
    ExpectInvalid(c, "model.type must be a string, got " + std::string(v.type_name()));
  }
}

TEST(TokenizerJsonErrors, PostProcessorOfTheWrongType) {
  json c = Tiny();
  c["post_processor"]["type"] = 1;
  ExpectInvalid(c, "post_processor.type must be a string, got number 1");
  c = Tiny();
  c["post_processor"] = 7;  // value() on a non-object threw type_error.306
  ExpectInvalid(c, "post_processor must be an object, got number");
  c = Tiny();
  c["post_processor"]["special_tokens"] = json::array();
  ExpectInvalid(c, "post_processor.special_tokens must be an object, got array");
  c = Tiny();
  c["post_processor"]["single"][0]["SpecialToken"]["id"] = 3;
  ExpectInvalid(c, "TemplateProcessing item single[0] is neither Sequence nor SpecialToken");
}

TEST(TokenizerJsonErrors, TemplateIdsOfTheWrongTypeNameTheirIndex) {
  json c = Tiny();
  c["post_processor"]["special_tokens"]["x"]["ids"] = json::array({1, "y"});
  ExpectInvalid(c, "post_processor.special_tokens.x.ids[1] must be an integer, got string \"y\"");
  c["post_processor"]["special_tokens"]["x"]["ids"] = json::array({1.5});
  ExpectInvalid(c, "post_processor.special_tokens.x.ids[0] must be an integer, got number 1.5");
  c["post_processor"]["special_tokens"]["x"]["ids"] = 1;  // iterating a scalar yields the scalar itself
  ExpectInvalid(c, "post_processor.special_tokens.x.ids must be a list, got number");
}

TEST(TokenizerJsonErrors, TemplateIdsOutsideTheVocabulary) {
  for (const json& id : {json(-5), json(2), json(99999), json(int64_t{1} << 32)}) {
    json c = Tiny();
    c["post_processor"]["special_tokens"]["x"]["ids"] = json::array({1, id});
    ExpectInvalid(c, "post_processor.special_tokens.x.ids[1] = " + id.dump() + " is outside the vocabulary [0, 2)");
  }
}

TEST(TokenizerJsonErrors, SplitFieldsOfTheWrongType) {
  json c = Tiny();
  c["pre_tokenizer"]["behavior"] = 1;
  ExpectInvalid(c, "pre_tokenizer Split behavior must be a string, got number 1");
  c = Tiny();
  c["pre_tokenizer"]["invert"] = 1;
  ExpectInvalid(c, "pre_tokenizer Split invert must be a boolean, got number 1");
  c = Tiny();
  c["pre_tokenizer"]["invert"] = "true";
  ExpectInvalid(c, "pre_tokenizer Split invert must be a boolean, got string");
  // Inside a Sequence too.
  c = Tiny();
  json split = c["pre_tokenizer"];
  split["behavior"] = json::array();
  c["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({split})}};
  ExpectInvalid(c, "pre_tokenizer Split behavior must be a string, got array");
  // null is the same as absent.
  c = Tiny();
  c["pre_tokenizer"]["behavior"] = nullptr;
  c["pre_tokenizer"]["invert"] = nullptr;
  EXPECT_TRUE(LoadStatus(c).ok()) << LoadStatus(c);
}

TEST(TokenizerJsonErrors, SparseIdsAreRefusedBeforeAllocating) {
  // One model.vocab id of 2^31 - 2 made the loader allocate a 2^31-entry table (32 GiB).
  json c = Tiny();
  c["model"]["vocab"]["b"] = 2147483646;
  ExpectInvalid(c, "model.vocab entry 'b' has id 2147483646, which leaves more than 1048576 ids without a token");
  // The same through added_tokens.
  c = Tiny();
  c["added_tokens"] = json::array({{{"id", 2000000000}, {"content", "<big>"}}});
  ExpectInvalid(c, "added_tokens entry '<big>' has id 2000000000");
  // A gap of up to kMaxIdGap ids is allowed.
  c = Tiny();
  c["model"]["vocab"]["b"] = Vocab::kMaxIdGap;
  c["post_processor"]["special_tokens"]["x"]["ids"] = json::array({0});
  auto tok = Tokenizer::FromJsonText(c.dump(), "tiny.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), Vocab::kMaxIdGap + 1);
}

TEST(TokenizerJsonErrors, DeepNestingIsRefusedBeforeItIsWalked) {
  // PreTokenizer::Add recursed once per Sequence level: 100000 levels overflowed the stack.
  json c = Tiny();
  c.erase("pre_tokenizer");
  std::string text = c.dump();
  text.pop_back();  // the closing brace
  constexpr int kLevels = 100000;
  text += ",\"pre_tokenizer\":";
  for (int i = 0; i < kLevels; ++i) text += "{\"type\":\"Sequence\",\"pretokenizers\":[";
  text += "{\"type\":\"Split\",\"pattern\":{\"String\":\"a\"}}";
  for (int i = 0; i < kLevels; ++i) text += "]}";
  text += "}";
  const absl::Status st = Tokenizer::FromJsonText(text, "tiny.json").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("JSON nested deeper than 64 levels"), std::string::npos) << st;
  // A few levels, as real files have, are fine.
  c = Tiny();
  for (int i = 0; i < 10; ++i) c["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({c["pre_tokenizer"]})}};
  EXPECT_TRUE(LoadStatus(c).ok()) << LoadStatus(c);
}

}  // namespace
}  // namespace layerpipe
