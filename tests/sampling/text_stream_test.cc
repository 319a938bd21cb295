#include "engine/sampling/text_stream.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

namespace layerpipe {
namespace {

std::unique_ptr<Tokenizer> RealTokenizer() {
  const char* env = std::getenv("LAYERPIPE_TOKENIZER");
  auto loaded = Tokenizer::Load(env != nullptr ? env : LAYERPIPE_TOKENIZER_PATH);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return loaded.ok() ? *std::move(loaded) : nullptr;
}

TEST(TextStreamTest, WithoutATokenizerStopIdsAndTheBudgetStillApply) {
  StopConfig stop;
  stop.stop_ids = {1};
  stop.max_new_tokens = 3;
  TextStream a(nullptr, stop);
  EXPECT_EQ(a.Push(10).reason, StopChecker::Reason::kNone);
  EXPECT_EQ(a.Push(1).reason, StopChecker::Reason::kStopId);
  TextStream b(nullptr, stop);
  b.Push(10);
  b.Push(11);
  const TextStream::Step last = b.Push(12);
  EXPECT_EQ(last.reason, StopChecker::Reason::kMaxTokens);
  EXPECT_TRUE(last.text.empty());
  EXPECT_TRUE(last.final_text.empty());
}

TEST(TextStreamTest, ReleasesTheDecodedTextAndHoldsBackAPossibleStopString) {
  auto tokenizer = RealTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<int32_t> ids = tokenizer->Encode("Hello world, again", /*add_bos=*/false);
  StopConfig stop;
  stop.stop_strings = {", again"};
  TextStream stream(tokenizer.get(), stop);
  std::string shown;
  StopChecker::Reason reason = StopChecker::Reason::kNone;
  for (int32_t id : ids) {
    TextStream::Step step = stream.Push(id);
    shown += step.text;
    // Never part of the stop string on screen.
    EXPECT_EQ(shown.find(','), std::string::npos) << shown;
    reason = step.reason;
    if (reason != StopChecker::Reason::kNone) break;
  }
  EXPECT_EQ(reason, StopChecker::Reason::kStopString);
  EXPECT_EQ(shown, "Hello world");
}

TEST(TextStreamTest, WhenTheBudgetEndsTheRunEveryByteIsShown) {
  auto tokenizer = RealTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  const std::string text = "naïve café";
  const std::vector<int32_t> ids = tokenizer->Encode(text, /*add_bos=*/false);
  StopConfig stop;
  stop.max_new_tokens = static_cast<int>(ids.size());
  TextStream stream(tokenizer.get(), stop);
  std::string shown;
  for (size_t i = 0; i < ids.size(); ++i) {
    TextStream::Step step = stream.Push(ids[i]);
    shown += step.text + step.final_text;
    EXPECT_EQ(step.reason == StopChecker::Reason::kMaxTokens, i + 1 == ids.size());
  }
  EXPECT_EQ(shown, text);
}

}  // namespace
}  // namespace layerpipe
