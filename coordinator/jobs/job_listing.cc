#include "coordinator/jobs/job_listing.h"

#include <algorithm>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace layerpipe {
namespace {

// Versioned, so that a later format can refuse this one by name.
constexpr char kTokenPrefix[] = "lpjobs1";

constexpr v1::JobState kStates[] = {v1::JOB_QUEUED,    v1::JOB_PREFILLING, v1::JOB_DECODING,
                                    v1::JOB_SUCCEEDED, v1::JOB_FAILED,     v1::JOB_CANCELLED};

std::string FilterName(v1::JobState state) {
  return state == v1::JOB_STATE_UNSPECIFIED ? "every state" : absl::StrCat("state ", JobStateName(state));
}

}  // namespace

const char* JobStateName(v1::JobState state) {
  switch (state) {
    case v1::JOB_QUEUED: return "queued";
    case v1::JOB_PREFILLING: return "prefilling";
    case v1::JOB_DECODING: return "decoding";
    case v1::JOB_SUCCEEDED: return "succeeded";
    case v1::JOB_FAILED: return "failed";
    case v1::JOB_CANCELLED: return "cancelled";
    default: return "unknown";
  }
}

std::optional<v1::JobState> JobStateFromName(const std::string& name) {
  for (v1::JobState s : kStates) {
    if (name == JobStateName(s)) return s;
  }
  return std::nullopt;
}

std::string JobStateNames() {
  std::vector<std::string> names;
  for (v1::JobState s : kStates) names.push_back(JobStateName(s));
  return absl::StrJoin(names, ", ");
}

std::string NextJobPageToken(v1::JobState state, int64_t last_seq) {
  return absl::WebSafeBase64Escape(absl::StrCat(kTokenPrefix, ":", static_cast<int>(state), ":", last_seq));
}

absl::StatusOr<JobPage> ParseJobPage(int64_t page_size, const std::string& page_token, v1::JobState state) {
  if (!v1::JobState_IsValid(state)) {
    return absl::InvalidArgumentError(absl::StrCat("state ", static_cast<int>(state), " is not a job state"));
  }
  if (page_size < 0) return absl::InvalidArgumentError(absl::StrCat("page_size must be >= 0, not ", page_size));
  JobPage page;
  page.state = state;
  page.size = page_size == 0 ? kDefaultJobPageSize : std::min(page_size, kMaxJobPageSize);
  if (page_token.empty()) return page;
  const absl::Status not_ours =
      absl::InvalidArgumentError("page_token is not a token this coordinator gave (pass next_page_token as it came)");
  std::string text;
  if (!absl::WebSafeBase64Unescape(page_token, &text)) return not_ours;
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  int token_state = 0;
  if (parts.size() != 3 || parts[0] != kTokenPrefix || !absl::SimpleAtoi(parts[1], &token_state) ||
      !v1::JobState_IsValid(token_state) || !absl::SimpleAtoi(parts[2], &page.before_seq) || page.before_seq <= 0) {
    return not_ours;
  }
  if (token_state != state) {
    return absl::InvalidArgumentError(absl::StrCat("page_token continues a listing of ",
                                                   FilterName(static_cast<v1::JobState>(token_state)),
                                                   ", and this request asks for ", FilterName(state),
                                                   ": start again without a token to change the filter"));
  }
  return page;
}

}  // namespace layerpipe
