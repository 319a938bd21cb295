#include "engine/sampling/stop_conditions.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace layerpipe {
namespace {

using Reason = StopChecker::Reason;

// Drives a checker the way a streaming CLI does and records what it would print.
struct Stream {
  explicit Stream(StopConfig config) : checker(std::move(config)) {}

  Reason Push(int32_t id, std::string_view text) {
    const Reason reason = checker.Push(id, text);
    printed += checker.TakeEmittable();
    return reason;
  }

  StopChecker checker;
  std::string printed;
};

StopConfig WithStopStrings(std::vector<std::string> strings) {
  StopConfig config;
  config.stop_strings = std::move(strings);
  return config;
}

TEST(StopChecker, DefaultsStopOnGemmaEndIds) {
  EXPECT_EQ(StopConfig{}.stop_ids, (std::vector<int32_t>{1, 106, 50}));
  for (int32_t id : {1, 106, 50}) {
    StopChecker checker{StopConfig{}};
    EXPECT_EQ(checker.Push(9, "Hi"), Reason::kNone);
    EXPECT_EQ(checker.Push(id, "<turn|>"), Reason::kStopId) << id;
    // The stop token's own text is not shown.
    EXPECT_EQ(checker.TakeEmittable(), "Hi");
    EXPECT_EQ(checker.Flush(), "");
  }
}

TEST(StopChecker, PlainTextStreamsThrough) {
  Stream s{StopConfig{}};
  EXPECT_EQ(s.Push(10, "Hello"), Reason::kNone);
  EXPECT_EQ(s.printed, "Hello");
  EXPECT_EQ(s.Push(11, ", world"), Reason::kNone);
  EXPECT_EQ(s.printed, "Hello, world");
  EXPECT_EQ(s.checker.num_tokens(), 2);
}

TEST(StopChecker, StopStringSplitAcrossPushes) {
  Stream s{WithStopStrings({"</stop>"})};
  EXPECT_EQ(s.Push(10, "answer"), Reason::kNone);
  EXPECT_EQ(s.Push(11, " 42</s"), Reason::kNone);
  // "</s" might begin the stop string: held back.
  EXPECT_EQ(s.printed, "answer 42");
  EXPECT_EQ(s.Push(12, "top> trailing"), Reason::kStopString);
  EXPECT_EQ(s.printed, "answer 42");
  EXPECT_EQ(s.checker.Flush(), "");
  EXPECT_EQ(s.checker.reason(), Reason::kStopString);
}

TEST(StopChecker, HeldBackTextIsReleasedWhenTheMatchFails) {
  Stream s{WithStopStrings({"</stop>"})};
  EXPECT_EQ(s.Push(10, "a </s"), Reason::kNone);
  EXPECT_EQ(s.printed, "a ");
  EXPECT_EQ(s.Push(11, "t"), Reason::kNone);
  EXPECT_EQ(s.printed, "a ");  // "</st" still could be it
  EXPECT_EQ(s.Push(12, "ring"), Reason::kNone);
  EXPECT_EQ(s.printed, "a </string");
}

TEST(StopChecker, FailedPartialMatchCanRestartInsideTheHeldText) {
  // "<<" fails as "<<a>" but its second "<" begins a real match.
  Stream s{WithStopStrings({"<a>"})};
  EXPECT_EQ(s.Push(1000, "x<"), Reason::kNone);
  EXPECT_EQ(s.printed, "x");
  EXPECT_EQ(s.Push(1001, "<"), Reason::kNone);
  EXPECT_EQ(s.printed, "x<");
  EXPECT_EQ(s.Push(1002, "a>y"), Reason::kStopString);
  EXPECT_EQ(s.printed, "x<");
}

TEST(StopChecker, StopStringInsideOneDelta) {
  Stream s{WithStopStrings({"STOP"})};
  EXPECT_EQ(s.Push(10, "beforeSTOPafter"), Reason::kStopString);
  EXPECT_EQ(s.printed, "before");
}

TEST(StopChecker, StopStringSpanningManySmallPushes) {
  Stream s{WithStopStrings({"\n\nUser:"})};
  const std::vector<std::string> pieces = {"ok", "\n", "\n", "Us", "e", "r", ":", " more"};
  Reason reason = Reason::kNone;
  size_t i = 0;
  for (; i < pieces.size() && reason == Reason::kNone; ++i) {
    reason = s.Push(static_cast<int32_t>(200 + i), pieces[i]);
  }
  EXPECT_EQ(reason, Reason::kStopString);
  EXPECT_EQ(i, 7u);  // the ":" push completed it
  EXPECT_EQ(s.printed, "ok");
}

TEST(StopChecker, EarliestOfSeveralStopStringsWins) {
  Stream s{WithStopStrings({"cd", "bcdef", "xyz"})};
  EXPECT_EQ(s.Push(10, "ab"), Reason::kNone);
  EXPECT_EQ(s.printed, "a");  // "b" begins "bcdef"
  EXPECT_EQ(s.Push(11, "cdefg"), Reason::kStopString);
  EXPECT_EQ(s.printed, "a");  // "bcdef" starts before "cd"
}

TEST(StopChecker, HoldsBackTheLongestPossibleStart) {
  Stream s{WithStopStrings({"abc", "bcx"})};
  EXPECT_EQ(s.Push(10, "zab"), Reason::kNone);
  EXPECT_EQ(s.printed, "z");
  EXPECT_EQ(s.Push(11, "c"), Reason::kStopString);
  EXPECT_EQ(s.printed, "z");
}

TEST(StopChecker, MultibyteTextIsNeverSplit) {
  // "é" is two bytes; the stop string starts with it, so a held-back piece is whole characters.
  Stream s{WithStopStrings({"\xC3\xA9nd"})};
  EXPECT_EQ(s.Push(10, "caf\xC3\xA9"), Reason::kNone);
  EXPECT_EQ(s.printed, "caf");
  EXPECT_EQ(s.Push(11, "!"), Reason::kNone);
  EXPECT_EQ(s.printed, "caf\xC3\xA9!");
}

TEST(StopChecker, StopIdReleasesHeldBackText) {
  Stream s{WithStopStrings({"</stop>"})};
  EXPECT_EQ(s.Push(10, "x </st"), Reason::kNone);
  EXPECT_EQ(s.printed, "x ");
  EXPECT_EQ(s.Push(106, "<turn|>"), Reason::kStopId);
  EXPECT_EQ(s.printed, "x </st");
}

TEST(StopChecker, MaxTokens) {
  StopConfig config;
  config.max_new_tokens = 3;
  Stream s{config};
  EXPECT_EQ(s.Push(10, "a"), Reason::kNone);
  EXPECT_EQ(s.Push(11, "b"), Reason::kNone);
  EXPECT_EQ(s.Push(12, "c"), Reason::kMaxTokens);
  // The last token's text is part of the output.
  EXPECT_EQ(s.printed, "abc");
}

TEST(StopChecker, MaxTokensReleasesHeldBackText) {
  StopConfig config = WithStopStrings({"###"});
  config.max_new_tokens = 2;
  Stream s{config};
  EXPECT_EQ(s.Push(10, "x#"), Reason::kNone);
  EXPECT_EQ(s.printed, "x");
  EXPECT_EQ(s.Push(11, "#"), Reason::kMaxTokens);
  EXPECT_EQ(s.printed, "x##");
}

TEST(StopChecker, PrecedenceOnTheSameToken) {
  StopConfig config = WithStopStrings({"END"});
  config.max_new_tokens = 1;
  StopChecker by_id(config);
  EXPECT_EQ(by_id.Push(1, "END"), Reason::kStopId);
  StopChecker by_string(config);
  EXPECT_EQ(by_string.Push(7, "xEND"), Reason::kStopString);
  EXPECT_EQ(by_string.TakeEmittable(), "x");
}

TEST(StopChecker, PushesAfterAStopChangeNothing) {
  Stream s{WithStopStrings({"!"})};
  EXPECT_EQ(s.Push(10, "hi!"), Reason::kStopString);
  EXPECT_EQ(s.Push(11, "more"), Reason::kStopString);
  EXPECT_EQ(s.Push(1, ""), Reason::kStopString);
  EXPECT_EQ(s.printed, "hi");
  EXPECT_EQ(s.checker.num_tokens(), 1);
}

TEST(StopChecker, FlushReleasesHeldTextWhenGenerationEndsElsewhere) {
  StopChecker checker(WithStopStrings({"</stop>"}));
  EXPECT_EQ(checker.Push(10, "tail </"), Reason::kNone);
  EXPECT_EQ(checker.TakeEmittable(), "tail ");
  EXPECT_EQ(checker.Flush(), "</");
  EXPECT_EQ(checker.Flush(), "");
}

TEST(StopChecker, TakeWithoutStreamingStillFindsMatches) {
  // A caller that only takes text at the end must get the same answer as one that streams.
  StopChecker checker(WithStopStrings({"<end>"}));
  EXPECT_EQ(checker.Push(10, "one <e"), Reason::kNone);
  EXPECT_EQ(checker.Push(11, "nd"), Reason::kNone);
  EXPECT_EQ(checker.Push(12, "> two"), Reason::kStopString);
  EXPECT_EQ(checker.TakeEmittable(), "one ");
  EXPECT_EQ(checker.Flush(), "");
}

TEST(StopChecker, EmptyStopStringsAndIdsAreAllowed) {
  StopConfig config;
  config.stop_ids.clear();
  config.stop_strings = {""};
  Stream s{config};
  EXPECT_EQ(s.Push(1, "a"), Reason::kNone);
  EXPECT_EQ(s.Push(106, "b"), Reason::kNone);
  EXPECT_EQ(s.printed, "ab");
}

TEST(StopChecker, ReasonNames) {
  EXPECT_EQ(StopReasonName(Reason::kNone), "none");
  EXPECT_EQ(StopReasonName(Reason::kStopId), "stop_id");
  EXPECT_EQ(StopReasonName(Reason::kStopString), "stop_string");
  EXPECT_EQ(StopReasonName(Reason::kMaxTokens), "max_tokens");
}

// ---------------------------------------------------------------- generation_config.json

class GenerationConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("layerpipe_stop_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& contents) {
    const std::string path = (dir_ / "generation_config.json").string();
    std::ofstream(path) << contents;
    return path;
  }

  std::filesystem::path dir_;
};

TEST_F(GenerationConfigTest, ListOfIds) {
  const auto ids = ReadStopIdsFromGenerationConfig(Write(
      R"({"bos_token_id": 2, "do_sample": true, "eos_token_id": [1, 106, 50], "top_k": 64})"));
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<int32_t>{1, 106, 50}));
}

TEST_F(GenerationConfigTest, SingleId) {
  const auto ids = ReadStopIdsFromGenerationConfig(Write(R"({"eos_token_id": 1})"));
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<int32_t>{1}));
}

TEST_F(GenerationConfigTest, DuplicatesAreDropped) {
  const auto ids = ReadStopIdsFromGenerationConfig(Write(R"({"eos_token_id": [106, 1, 106]})"));
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<int32_t>{106, 1}));
}

TEST_F(GenerationConfigTest, MissingFileOrKeyGivesDefaults) {
  const auto missing = ReadStopIdsFromGenerationConfig((dir_ / "absent.json").string());
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_EQ(*missing, (std::vector<int32_t>{1, 106, 50}));
  const auto no_key = ReadStopIdsFromGenerationConfig(Write(R"({"temperature": 1.0})"));
  ASSERT_TRUE(no_key.ok()) << no_key.status();
  EXPECT_EQ(*no_key, (std::vector<int32_t>{1, 106, 50}));
}

void ExpectErrorNaming(const absl::StatusOr<std::vector<int32_t>>& result, const std::string& path,
                       const std::string& what) {
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find(path), std::string_view::npos) << result.status();
  EXPECT_NE(result.status().message().find(what), std::string_view::npos) << result.status();
}

TEST_F(GenerationConfigTest, CorruptFileIsAnErrorNamingIt) {
  const std::string path = Write(R"({"eos_token_id": [1, 106)");
  const auto result = ReadStopIdsFromGenerationConfig(path);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  ExpectErrorNaming(result, path, "not valid JSON");
  ExpectErrorNaming(ReadStopIdsFromGenerationConfig(Write("")), path, "not valid JSON");
  ExpectErrorNaming(ReadStopIdsFromGenerationConfig(Write("[1, 2]")), path, "JSON object");
}

TEST_F(GenerationConfigTest, BadIdsAreErrors) {
  const std::string path = Write("{}");
  ExpectErrorNaming(ReadStopIdsFromGenerationConfig(Write(R"({"eos_token_id": "1"})")), path,
                    "non-negative 32-bit integers");
  ExpectErrorNaming(ReadStopIdsFromGenerationConfig(Write(R"({"eos_token_id": [1, -3]})")), path,
                    "got -3");
  ExpectErrorNaming(ReadStopIdsFromGenerationConfig(Write(R"({"eos_token_id": [1.5]})")), path,
                    "got 1.5");
  ExpectErrorNaming(ReadStopIdsFromGenerationConfig(Write(R"({"eos_token_id": 4294967296})")), path,
                    "got 4294967296");
  ExpectErrorNaming(ReadStopIdsFromGenerationConfig(Write(R"({"eos_token_id": []})")), path,
                    "empty list");
}

TEST_F(GenerationConfigTest, DirectoryIsAnError) {
  const auto result = ReadStopIdsFromGenerationConfig(dir_.string());
  ExpectErrorNaming(result, dir_.string(), "not a regular file");
}

}  // namespace
}  // namespace layerpipe
