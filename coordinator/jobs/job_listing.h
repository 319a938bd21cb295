// ListJobs' page: its size, its state filter, and the page token that says where the next page starts.
// The token is opaque to clients; it carries the filter it was made for, so that it cannot silently skip
// or repeat jobs under another one.
#ifndef LAYERPIPE_COORDINATOR_JOBS_JOB_LISTING_H_
#define LAYERPIPE_COORDINATOR_JOBS_JOB_LISTING_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "proto/layerpipe.pb.h"

namespace layerpipe {

inline constexpr int64_t kDefaultJobPageSize = 100;
inline constexpr int64_t kMaxJobPageSize = 1000;

struct JobPage {
  int64_t size = kDefaultJobPageSize;
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;  // unspecified: every state
  // Only jobs submitted before the one with this submission number (0: from the newest).
  int64_t before_seq = 0;
};

// A page as a client asks for it. page_size 0 is the default (100); above 1000 it is 1000 (as Google's
// AIP-158 reads page sizes); negative is InvalidArgument. A page_token that is not one of ours, or one
// given for another state filter, is InvalidArgument with a message that says which.
absl::StatusOr<JobPage> ParseJobPage(int64_t page_size, const std::string& page_token, v1::JobState state);

// The token of the page after one whose last (oldest) job has submission number `last_seq`.
std::string NextJobPageToken(v1::JobState state, int64_t last_seq);

// "queued", "prefilling", "decoding", "succeeded", "failed", "cancelled" (HTTP's and the CLI's names),
// and back; nullopt for any other name.
const char* JobStateName(v1::JobState state);
std::optional<v1::JobState> JobStateFromName(const std::string& name);
// Those names, comma-separated, for a refusal's message.
std::string JobStateNames();

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_JOBS_JOB_LISTING_H_
