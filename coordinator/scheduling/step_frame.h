// A step plan as the frame stage 0 receives: for each slice the sequence, its first position and ids,
// and what the last stage must do with it (sample, with the request's sampling parameters on its
// first slice; score; return logits), and the image blocks and soft-token inputs among its ids
// (audio frames of samples_per_token samples); the prefix cache's starts, keeps and drops (prefix_cache.h). Pure, so what the workers are told is testable without them.
#ifndef LAYERPIPE_COORDINATOR_SCHEDULING_STEP_FRAME_H_
#define LAYERPIPE_COORDINATOR_SCHEDULING_STEP_FRAME_H_

#include <cstdint>
#include <vector>

#include "coordinator/scheduling/scheduler.h"
#include "proto/internal.pb.h"

namespace layerpipe {

internal::v1::StepFrame BuildStepFrame(const StepPlan& plan, uint64_t epoch, uint64_t step_id,
                             const std::vector<uint64_t>& releases, int64_t samples_per_token = 640,
                             const std::vector<uint64_t>& drops = {});

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_SCHEDULING_STEP_FRAME_H_
