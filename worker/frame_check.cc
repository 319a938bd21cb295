#include "worker/frame_check.h"

#include <unordered_set>

#include "absl/strings/str_cat.h"

namespace layerpipe {
namespace {

absl::Status SliceError(int index, uint64_t seq_id, const absl::Status& st) {
  return absl::Status(st.code(), absl::StrCat("slice ", index, " (sequence ", seq_id, "): ", st.message()));
}

absl::Status CheckSlice(const internal::v1::StepSlice& s, const StageShape& shape) {
  if (s.ids_size() == 0) return absl::InvalidArgumentError("no token ids");
  if (s.pos0() < 0) return absl::InvalidArgumentError(absl::StrCat("pos0 ", s.pos0(), " is negative"));
  if (s.pos0() > shape.max_positions - s.ids_size()) {
    // The last position is computed unsigned: pos0 (>= 0) may be as large as INT64_MAX.
    const uint64_t last = static_cast<uint64_t>(s.pos0()) + static_cast<uint64_t>(s.ids_size() - 1);
    return absl::OutOfRangeError(absl::StrCat("positions ", s.pos0(), "..", last, " pass the model's limit of ",
                                              shape.max_positions));
  }
  for (int i = 0; i < s.ids_size(); ++i) {
    if (s.ids(i) < 0 || s.ids(i) >= shape.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", s.ids(i), " at index ", i,
                                                     " is outside the vocabulary [0, ", shape.vocab_size, ")"));
    }
  }
  if (s.has_sampling()) {
    if (auto st = ValidateSamplingParams(ToSamplingParams(s.sampling())); !st.ok()) return st;
  }
  // One draw per sampled token, so a sequence can never have used more draws than it has positions
  // (a bound that also keeps skipping cheap).
  if (s.rng_skip() < 0 || s.rng_skip() > shape.max_positions) {
    return absl::InvalidArgumentError(
        absl::StrCat("rng_skip ", s.rng_skip(), " is outside [0, ", shape.max_positions, "]"));
  }
  if (s.top_logprobs() < 0 || s.top_logprobs() > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_logprobs ", s.top_logprobs(), " is outside [0, ", kMaxTopLogprobs, "]"));
  }
  if (s.score() && (s.next_id() < -1 || s.next_id() >= shape.vocab_size)) {
    return absl::InvalidArgumentError(absl::StrCat("next_id ", s.next_id(), " is neither -1 nor in the vocabulary [0, ",
                                                   shape.vocab_size, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckFrameContent(const internal::v1::StepFrame& frame, const StageShape& shape, int64_t* rows) {
  int64_t total = 0, logits = 0;
  std::unordered_set<uint64_t> seen;
  for (int i = 0; i < frame.slices_size(); ++i) {
    const internal::v1::StepSlice& s = frame.slices(i);
    if (!seen.insert(s.seq_id()).second) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s.seq_id(), " appears in more than one slice"));
    }
    if (auto st = CheckSlice(s, shape); !st.ok()) return SliceError(i, s.seq_id(), st);
    total += s.ids_size();
    if (s.return_logits()) logits += s.ids_size() * shape.vocab_size;
  }
  if (logits > kMaxReturnedLogits) {
    return absl::InvalidArgumentError(absl::StrCat("return_logits asks for ", logits, " logit values; at most ",
                                                   kMaxReturnedLogits, " fit in one step"));
  }
  if (total > kMaxRowsPerFrame) {
    return absl::InvalidArgumentError(
        absl::StrCat("the frame carries ", total, " tokens; at most ", kMaxRowsPerFrame, " are allowed"));
  }
  if (shape.first && !frame.hidden().empty()) {
    return absl::InvalidArgumentError("the first stage embeds the ids itself; its frames must not carry hidden");
  }
  *rows = total;
  return absl::OkStatus();
}

}  // namespace layerpipe
