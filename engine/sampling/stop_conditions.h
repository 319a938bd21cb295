// When generation ends (stop id, stop string, token budget) and which generated text may be shown.
#ifndef LAYERPIPE_ENGINE_SAMPLING_STOP_CONDITIONS_H_
#define LAYERPIPE_ENGINE_SAMPLING_STOP_CONDITIONS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace layerpipe {

// The -it model's end of generation: <eos> 1, end of turn 106, and 50.
inline const std::vector<int32_t>& DefaultStopIds() {
  static const std::vector<int32_t> ids = {1, 106, 50};
  return ids;
}

struct StopConfig {
  std::vector<int32_t> stop_ids = DefaultStopIds();
  std::vector<std::string> stop_strings;  // empty strings are ignored
  int max_new_tokens = 0;                 // 0 = no limit
};

// Tracks one sequence. Streaming use:
//
//   for each generated id:
//     reason = checker.Push(id, detokenizer_delta);
//     print(checker.TakeEmittable());
//     if (reason != kNone) break;
//   print(checker.Flush());   // only needed when the loop ends for another reason (e.g. context
//   full)
//
// prints exactly the generated text up to, not including, the first stop string; a stop id
// contributes no text; a suffix that might begin a stop string is held back until the next push
// settles it, so a partial stop string is never printed. Since stop strings and deltas are whole
// UTF-8, held-back and emitted pieces always split on character boundaries.
class StopChecker {
 public:
  enum class Reason { kNone, kStopId, kStopString, kMaxTokens };

  explicit StopChecker(StopConfig config);

  // Feeds one generated id and the text it produced. Returns why generation must stop now, or
  // kNone. Precedence when several apply to the same token: stop id, then stop string, then max
  // tokens. Once a reason has been returned, later pushes change nothing and return that reason
  // again.
  Reason Push(int32_t id, std::string_view new_text);

  // Text that is safe to show now, removed from the checker. After a stop it is everything before
  // the stop string (or everything, for the other reasons), including text that was being held
  // back.
  std::string TakeEmittable();

  // Everything not yet taken, held-back text included, up to the stop string if one matched; for
  // the end of a generation that stopped for a reason the checker does not know about.
  std::string Flush();

  Reason reason() const { return reason_; }
  bool stopped() const { return reason_ != Reason::kNone; }
  int num_tokens() const { return num_tokens_; }

 private:
  // Length of the longest suffix of pending_ that is a proper prefix of some stop string.
  size_t HeldBackLength() const;

  StopConfig config_;
  size_t max_stop_string_length_ = 0;
  Reason reason_ = Reason::kNone;
  int num_tokens_ = 0;
  std::string pending_;   // produced but not yet taken
  size_t emittable_ = 0;  // pending_[0, emittable_) may be shown
};

std::string_view StopReasonName(StopChecker::Reason reason);

// The stop ids from a Hugging Face generation_config.json: `eos_token_id`, an int or a list of
// ints. A missing file, or a file without eos_token_id, gives DefaultStopIds(); an unreadable or
// malformed file, or ids that are not non-negative 32-bit integers, give an error naming the file.
absl::StatusOr<std::vector<int32_t>> ReadStopIdsFromGenerationConfig(const std::string& path);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_SAMPLING_STOP_CONDITIONS_H_
