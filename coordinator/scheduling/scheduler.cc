#include "coordinator/scheduling/scheduler.h"

#include <algorithm>

#include "coordinator/scheduling/prefix_cache.h"

namespace layerpipe {

std::optional<StepPlan> Scheduler::Plan(const std::vector<std::shared_ptr<Request>>& running,
                                        size_t steps_in_flight, bool releases_pending) {
  if (steps_in_flight >= limits_.max_steps_in_flight) return std::nullopt;
  StepPlan plan;
  // A decode token needs the previous one's sample back, so a sequence in flight waits.
  for (const auto& r : running) {
    if (r->in_flight > 0 || r->done() || r->state != RequestState::kDecoding || r->sent == r->known()) continue;
    if (static_cast<int>(plan.slices.size()) >= limits_.max_batch) break;
    plan.slices.push_back({r, r->sent, r->known() - r->sent});
  }
  std::vector<std::shared_ptr<Request>> prefilling;
  for (const auto& r : running) {
    // One that starts from a prefix still being made waits until the slice that keeps it has gone.
    if (r->prefix_from && !r->prefix_from->kept) continue;
    if (!r->done() && r->state == RequestState::kPrefilling && r->sent < r->known()) prefilling.push_back(r);
  }
  if (!prefilling.empty()) {
    const std::shared_ptr<Request>& r = prefilling[prefill_rr_++ % prefilling.size()];
    // A chunk never cuts an image: its soft tokens must see each other in one pass on every stage.
    int64_t end = ChunkEnd(r->soft, r->sent, r->known(), limits_.prefill_chunk);
    // A prefix it keeps is taken at the end of a slice (cuts are never inside an image).
    for (const auto& e : r->prefix_saves) {
      if (e->length > r->sent) {
        end = std::min(end, e->length);
        break;
      }
    }
    plan.slices.push_back({r, r->sent, end - r->sent});
  }
  if (plan.slices.empty() && !releases_pending) return std::nullopt;
  return plan;
}

void Scheduler::MarkSent(const StepPlan& plan) {
  for (const PlannedSlice& s : plan.slices) {
    s.request->sent = s.pos0 + s.count;
    ++s.request->in_flight;
  }
}

void PrepareReplay(Request& r) {
  r.fed = r.start();
  r.sent = r.start();
  r.in_flight = 0;
  r.state = RequestState::kPrefilling;
  r.score_logprobs.clear();
  r.logits.clear();
}

}  // namespace layerpipe
