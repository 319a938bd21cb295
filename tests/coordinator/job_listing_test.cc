#include "coordinator/jobs/job_listing.h"

#include <gtest/gtest.h>

namespace layerpipe {
namespace {

TEST(JobListingTest, PageSizeDefaultsAndCaps) {
  EXPECT_EQ(ParseJobPage(0, "", v1::JOB_STATE_UNSPECIFIED)->size, 100);
  EXPECT_EQ(ParseJobPage(7, "", v1::JOB_STATE_UNSPECIFIED)->size, 7);
  EXPECT_EQ(ParseJobPage(1000, "", v1::JOB_STATE_UNSPECIFIED)->size, 1000);
  EXPECT_EQ(ParseJobPage(5000, "", v1::JOB_STATE_UNSPECIFIED)->size, 1000);
  auto negative = ParseJobPage(-1, "", v1::JOB_STATE_UNSPECIFIED);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(negative.status().message().find("page_size"), std::string::npos);
  EXPECT_EQ(ParseJobPage(0, "", static_cast<v1::JobState>(42)).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(JobListingTest, TokensRoundTripUnderTheirOwnFilterOnly) {
  const std::string token = NextJobPageToken(v1::JOB_SUCCEEDED, 12345);
  auto page = ParseJobPage(10, token, v1::JOB_SUCCEEDED);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->before_seq, 12345);
  EXPECT_EQ(page->state, v1::JOB_SUCCEEDED);
  auto other = ParseJobPage(10, token, v1::JOB_STATE_UNSPECIFIED);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(other.status().message().find("state succeeded"), std::string::npos) << other.status();
  EXPECT_NE(other.status().message().find("every state"), std::string::npos) << other.status();
  EXPECT_TRUE(ParseJobPage(10, NextJobPageToken(v1::JOB_STATE_UNSPECIFIED, 3), v1::JOB_STATE_UNSPECIFIED).ok());
}

TEST(JobListingTest, ForeignTokensAreRefused) {
  for (const std::string token : {"garbage!", "bHBqb2JzMTo0", "bHBqb2JzMToxOjA", "eHl6OjA6MTA", "bHBqb2JzMTo5OToxMA"}) {
    auto page = ParseJobPage(10, token, v1::JOB_STATE_UNSPECIFIED);
    EXPECT_EQ(page.status().code(), absl::StatusCode::kInvalidArgument) << token;
    EXPECT_NE(page.status().message().find("page_token"), std::string::npos) << token;
  }
}

TEST(JobListingTest, StateNamesRoundTrip) {
  for (v1::JobState s : {v1::JOB_QUEUED, v1::JOB_PREFILLING, v1::JOB_DECODING, v1::JOB_SUCCEEDED, v1::JOB_FAILED,
                         v1::JOB_CANCELLED}) {
    EXPECT_EQ(JobStateFromName(JobStateName(s)), s);
  }
  EXPECT_EQ(JobStateNames(), "queued, prefilling, decoding, succeeded, failed, cancelled");
  EXPECT_FALSE(JobStateFromName("done").has_value());
  EXPECT_FALSE(JobStateFromName("unknown").has_value());
}

}  // namespace
}  // namespace layerpipe
