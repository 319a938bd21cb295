// What goes into the next step (the batching side of scheduling): running requests and limits in, a
// step plan out. Pure: it reads the requests' progress and changes nothing but its own round-robin
// cursor; the pipeline applies a plan with MarkSent once the step is on its way.
//
// Policy (continuous batching): every decoding sequence whose previous token came back contributes its
// next token, up to max_batch of them; then at most one prefill chunk of at most prefill_chunk tokens,
// taken round-robin among the prompts being prefilled (longer or shorter so as not to cut an image), so a long prompt never starves short ones and
// decode latency stays bounded by one chunk. Chunks of one prompt may follow each other down the pipe
// (every stage runs steps in order, so the KV stays consistent). At most max_steps_in_flight steps are
// on their way at once (one per stage keeps every stage busy).
#ifndef LAYERPIPE_COORDINATOR_SCHEDULING_SCHEDULER_H_
#define LAYERPIPE_COORDINATOR_SCHEDULING_SCHEDULER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "coordinator/request.h"

namespace layerpipe {

struct SchedulerLimits {
  int max_batch = 64;             // decode slices per step
  int64_t prefill_chunk = 256;    // prompt tokens per step, for the one prefilling sequence
  size_t max_steps_in_flight = 1;  // the pipeline sets its stage count
};

struct PlannedSlice {
  std::shared_ptr<Request> request;
  int64_t pos0 = 0;   // first position the slice feeds
  int64_t count = 0;  // tokens it feeds
};

struct StepPlan {
  std::vector<PlannedSlice> slices;  // decode slices first, then the prefill chunk if any
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerLimits limits) : limits_(limits) {}

  // The next step, or nothing when the pipe is full or there is no work. `releases_pending`: sequences
  // to free on the workers, which a step with no slices can carry alone.
  std::optional<StepPlan> Plan(const std::vector<std::shared_ptr<Request>>& running, size_t steps_in_flight,
                               bool releases_pending);

  // Records that `plan` was sent: each slice's request has fed `count` more positions down the pipe
  // and one more step in flight.
  static void MarkSent(const StepPlan& plan);

  const SchedulerLimits& limits() const { return limits_; }

 private:
  const SchedulerLimits limits_;
  size_t prefill_rr_ = 0;
};

// After a new epoch every worker has forgotten every sequence: each running request starts over from
// its start (position 0, or the prefix it starts from, which PrefixCache::OnNewEpoch has it wait for) and replays its prompt and the tokens generated so far (a score request its prompt).
void PrepareReplay(Request& request);

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_SCHEDULING_SCHEDULER_H_
