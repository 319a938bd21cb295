#include "common/log.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>

namespace layerpipe {
namespace {

TEST(LogTest, OneLineWithSeverityTimestampAndProgram) {
  SetLogProgramName("layerpipe-test");
  testing::internal::CaptureStderr();
  LP_LOG(WARNING) << "stage " << 2 << " is draining";
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(std::regex_match(out, std::regex(R"(W\d{8} \d\d:\d\d:\d\d\.\d{6} layerpipe-test\] stage 2 is draining\n)")))
      << out;
}

TEST(LogTest, BelowTheMinimumIsDropped) {
  SetMinLogSeverity(LogSeverity::kWarning);
  testing::internal::CaptureStderr();
  LP_LOG(INFO) << "quiet";
  LP_LOG(ERROR) << "loud";
  const std::string out = testing::internal::GetCapturedStderr();
  SetMinLogSeverity(LogSeverity::kInfo);
  EXPECT_EQ(out.find("quiet"), std::string::npos);
  EXPECT_NE(out.find("loud"), std::string::npos);
}

TEST(LogTest, DefaultProgramNameIsTheExecutable) {
  // Before any SetLogProgramName in this process image the name is argv[0]'s base name; here the
  // first test set it, so only check the setter round-trips.
  SetLogProgramName("x");
  EXPECT_EQ(LogProgramName(), "x");
}

TEST(LogDeathTest, FatalAborts) { EXPECT_DEATH(LP_LOG(FATAL) << "boom", "boom"); }

}  // namespace
}  // namespace layerpipe
