#include "coordinator/scheduling/step_frame.h"

namespace layerpipe {

internal::v1::StepFrame BuildStepFrame(const StepPlan& plan, uint64_t epoch, uint64_t step_id,
                             const std::vector<uint64_t>& releases) {
  internal::v1::StepFrame frame;
  frame.set_epoch(epoch);
  frame.set_step_id(step_id);
  for (uint64_t id : releases) frame.add_release(id);
  for (const PlannedSlice& p : plan.slices) {
    const Request& r = *p.request;
    internal::v1::StepSlice* s = frame.add_slices();
    s->set_seq_id(r.id);
    s->set_pos0(p.pos0);
    for (int64_t pos = p.pos0; pos < p.pos0 + p.count; ++pos) s->add_ids(r.token_at(pos));
    const bool reaches_end = p.pos0 + p.count == r.known();
    if (r.kind == RequestKind::kGenerate) {
      s->set_sample(reaches_end);
      s->set_top_logprobs(r.top_logprobs);
      if (p.pos0 == 0) {
        // The last stage learns a sequence's sampling with its first slice.
        *s->mutable_sampling() = r.sampling_proto;
        // A replayed sequence resumes its RNG where it stopped (one draw per sampled token).
        if (r.sampling.temperature > 0) s->set_rng_skip(static_cast<int64_t>(r.generated.size()));
      }
    } else {
      s->set_score(true);
      s->set_return_logits(r.return_logits);
      s->set_next_id(reaches_end ? -1 : r.token_at(p.pos0 + p.count));
    }
  }
  return frame;
}

}  // namespace layerpipe
