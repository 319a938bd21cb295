#include "worker/step_sequencer.h"

#include "absl/strings/str_cat.h"

namespace layerpipe {

void StepSequencer::Reset() {
  next_ = 1;
  held_.clear();
}

absl::Status StepSequencer::Check(uint64_t step_id) const {
  if (step_id == 0) return absl::InvalidArgumentError("step_id 0 is invalid (steps of an epoch start at 1)");
  if (step_id < next_ || held_.count(step_id) > 0) {
    return absl::AlreadyExistsError(absl::StrCat("step ", step_id, " was already received"));
  }
  if (step_id - next_ >= kMaxAhead) {
    return absl::InvalidArgumentError(absl::StrCat("step ", step_id, " is too far ahead: the stage waits for step ",
                                                   next_, " and holds at most ", kMaxAhead, " steps"));
  }
  return absl::OkStatus();
}

void StepSequencer::Add(uint64_t step_id, QueuedStep step) { held_.emplace(step_id, std::move(step)); }

bool StepSequencer::Ready() const { return !held_.empty() && held_.begin()->first == next_; }

QueuedStep StepSequencer::Pop() {
  auto it = held_.begin();
  QueuedStep step = std::move(it->second);
  held_.erase(it);
  ++next_;
  return step;
}

}  // namespace layerpipe
