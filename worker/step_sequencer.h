// Puts the steps of one epoch back in step_id order: frames may arrive out of order (several RPCs in
// flight), but a stage's KV caches only make sense if steps run in the order the coordinator planned.
#ifndef LAYERPIPE_WORKER_STEP_SEQUENCER_H_
#define LAYERPIPE_WORKER_STEP_SEQUENCER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "engine/backend/device_handoff.h"
#include "proto/internal.pb.h"

namespace layerpipe {

// One accepted frame, waiting for its turn.
struct QueuedStep {
  internal::v1::StepFrame frame;        // everything but `hidden`
  std::vector<float> hidden;  // decoded activations; empty into the first stage
  std::unique_ptr<DeviceRows> device_hidden;  // instead of `hidden`: received over the peer link
  // Not OK: the frame was refused when it arrived (the sender got this error too). It still takes its
  // place in the order, as a step without slices that only releases, so later steps are not held
  // back forever.
  absl::Status refusal;
};

class StepSequencer {
 public:
  // How far past the next expected id a frame may be: bounds the memory early arrivals can hold.
  static constexpr uint64_t kMaxAhead = 1024;

  // A new epoch: step ids start again at 1; held frames are dropped.
  void Reset();

  // InvalidArgument for id 0 or an id too far ahead; AlreadyExists for an id already taken.
  absl::Status Check(uint64_t step_id) const;
  // step_id must have passed Check.
  void Add(uint64_t step_id, QueuedStep step);

  // Whether the next step in order has arrived.
  bool Ready() const;
  // The next step in order; only when Ready().
  QueuedStep Pop();

  uint64_t next_step_id() const { return next_; }
  size_t held() const { return held_.size(); }

 private:
  uint64_t next_ = 1;
  std::map<uint64_t, QueuedStep> held_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_WORKER_STEP_SEQUENCER_H_
