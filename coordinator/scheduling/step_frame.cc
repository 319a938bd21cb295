#include "coordinator/scheduling/step_frame.h"

#include "coordinator/scheduling/prefix_cache.h"

namespace layerpipe {
namespace {

// The slice's image blocks (every stage) and the soft tokens' pixels and samples (the first stage).
void AddSoftTokens(const Request& r, const PlannedSlice& p, int64_t samples_per_token, internal::v1::StepSlice* s) {
  for (const SoftSpan& span : SpansIn(r.soft, p.pos0, p.pos0 + p.count, samples_per_token)) {
    internal::v1::SoftInput* in = s->add_soft_inputs();
    in->set_offset(span.offset);
    in->set_count(span.count);
    if (span.kind == SoftSpan::Kind::kImage) {
      internal::v1::PositionSpan* b = s->add_image_blocks();
      b->set_begin(p.pos0 + span.offset);
      b->set_end(p.pos0 + span.offset + span.count);
      internal::v1::PreparedImage* im = in->mutable_image();
      im->set_height(span.image.height);
      im->set_width(span.image.width);
      im->set_rgb(span.image.rgb, static_cast<size_t>(span.image.height * span.image.width * 3));
    } else {
      in->set_audio_samples(span.samples, static_cast<size_t>(span.count * samples_per_token) * sizeof(float));
    }
  }
}

}  // namespace

internal::v1::StepFrame BuildStepFrame(const StepPlan& plan, uint64_t epoch, uint64_t step_id,
                             const std::vector<uint64_t>& releases, int64_t samples_per_token,
                             const std::vector<uint64_t>& drops) {
  internal::v1::StepFrame frame;
  frame.set_epoch(epoch);
  frame.set_step_id(step_id);
  for (uint64_t id : releases) frame.add_release(id);
  for (uint64_t key : drops) frame.add_drop_prefix(key);
  for (const PlannedSlice& p : plan.slices) {
    const Request& r = *p.request;
    internal::v1::StepSlice* s = frame.add_slices();
    s->set_seq_id(r.id);
    s->set_pos0(p.pos0);
    const bool first = p.pos0 == r.start();
    if (first && r.prefix_from) s->set_prefix_from(r.prefix_from->key);
    for (const auto& e : r.prefix_saves) {
      if (e->length == p.pos0 + p.count) s->set_save_prefix(e->key);
    }
    for (int64_t pos = p.pos0; pos < p.pos0 + p.count; ++pos) s->add_ids(r.token_at(pos));
    if (!r.soft.empty()) AddSoftTokens(r, p, samples_per_token, s);
    const bool reaches_end = p.pos0 + p.count == r.known();
    if (r.kind == RequestKind::kGenerate) {
      s->set_sample(reaches_end);
      s->set_top_logprobs(r.top_logprobs);
      if (first) {
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
