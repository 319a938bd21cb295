#include "coordinator/scheduling/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "coordinator/scheduling/step_frame.h"
#include "tests/coordinator/scheduling_test_util.h"

namespace layerpipe {
namespace {

using testing_scheduling::Decoding;
using testing_scheduling::MakeRequest;
using testing_scheduling::Prefilling;

using Running = std::vector<std::shared_ptr<Request>>;

// What one step's results do to the requests' progress, as the pipeline applies them: every slice's
// positions are fed, and a generate request that reached its end gets a token and decodes.
void Complete(const StepPlan& plan) {
  for (const PlannedSlice& s : plan.slices) {
    Request& r = *s.request;
    --r.in_flight;
    r.fed += s.count;
    if (r.fed == r.known() && r.kind == RequestKind::kGenerate) {
      r.state = RequestState::kDecoding;
      r.generated.push_back(7);
    }
  }
}

TEST(SchedulerTest, EveryReadyDecodeTokenPlusOnePrefillChunk) {
  Scheduler sched({/*max_batch=*/64, /*prefill_chunk=*/16, /*max_steps_in_flight=*/2});
  Running running = {Decoding(1, 10, 3), Prefilling(2, 40), Decoding(3, 5, 1), Prefilling(4, 40)};
  auto plan = sched.Plan(running, 0, false);
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->slices.size(), 3u);
  EXPECT_EQ(plan->slices[0].request->id, 1u);
  EXPECT_EQ(plan->slices[0].count, 1);
  EXPECT_EQ(plan->slices[0].pos0, running[0]->known() - 1);
  EXPECT_EQ(plan->slices[1].request->id, 3u);
  // The one prefill chunk comes last and is at most prefill_chunk long.
  EXPECT_EQ(plan->slices[2].request->state, RequestState::kPrefilling);
  EXPECT_EQ(plan->slices[2].pos0, 0);
  EXPECT_EQ(plan->slices[2].count, 16);
}

TEST(SchedulerTest, DecodeSlicesAreCappedAtMaxBatch) {
  Scheduler sched({/*max_batch=*/64, 256, /*max_steps_in_flight=*/2});
  Running running;
  for (uint64_t i = 0; i < 70; ++i) running.push_back(Decoding(i, 4, 1));
  auto plan = sched.Plan(running, 0, false);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->slices.size(), 64u);
  // Nobody is dropped: with those 64 in flight, the next step takes the other six.
  Scheduler::MarkSent(*plan);
  auto rest = sched.Plan(running, 1, false);
  ASSERT_TRUE(rest.has_value());
  ASSERT_EQ(rest->slices.size(), 6u);
  EXPECT_EQ(rest->slices[0].request->id, 64u);
}

TEST(SchedulerTest, ASequenceInFlightWaitsForItsToken) {
  Scheduler sched({64, 256, 4});
  Running running = {Decoding(1, 10, 2)};
  auto plan = sched.Plan(running, 0, false);
  ASSERT_TRUE(plan.has_value());
  Scheduler::MarkSent(*plan);
  EXPECT_EQ(running[0]->in_flight, 1);
  EXPECT_FALSE(sched.Plan(running, 1, false).has_value());
  Complete(*plan);
  EXPECT_TRUE(sched.Plan(running, 0, false).has_value());
}

TEST(SchedulerTest, APromptsChunksFollowEachOtherDownThePipe) {
  Scheduler sched({64, /*prefill_chunk=*/8, /*max_steps_in_flight=*/3});
  Running running = {Prefilling(1, 20)};
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (size_t in_flight = 0; in_flight < 3; ++in_flight) {
    auto plan = sched.Plan(running, in_flight, false);
    ASSERT_TRUE(plan.has_value());
    ASSERT_EQ(plan->slices.size(), 1u);
    chunks.push_back({plan->slices[0].pos0, plan->slices[0].count});
    Scheduler::MarkSent(*plan);
  }
  EXPECT_EQ(chunks, (std::vector<std::pair<int64_t, int64_t>>{{0, 8}, {8, 8}, {16, 4}}));
  // Nothing left to send, and the pipe is full anyway.
  EXPECT_FALSE(sched.Plan(running, 2, false).has_value());
  EXPECT_FALSE(sched.Plan(running, 3, true).has_value());
}

TEST(SchedulerTest, PrefillIsRoundRobinSoNoPromptStarves) {
  Scheduler sched({64, /*prefill_chunk=*/4, 1});
  Running running = {Prefilling(1, 400), Prefilling(2, 400)};
  std::vector<uint64_t> order;
  for (int step = 0; step < 6; ++step) {
    if (step == 2) running.push_back(Prefilling(3, 4));  // a short prompt arrives behind two long ones
    auto plan = sched.Plan(running, 0, false);
    ASSERT_TRUE(plan.has_value());
    const PlannedSlice& chunk = plan->slices.back();
    order.push_back(chunk.request->id);
    Scheduler::MarkSent(*plan);
    Complete(*plan);
  }
  // Every prompt got a chunk within one round of the others, the short one included.
  std::map<uint64_t, int> chunks;
  for (uint64_t id : order) ++chunks[id];
  EXPECT_EQ(chunks.size(), 3u) << ::testing::PrintToString(order);
  EXPECT_LE(std::find(order.begin(), order.end(), 3u) - order.begin(), 2 + 3);
  // The short prompt finished its prefill and decodes now; its token rides with the long chunks.
  auto next = sched.Plan(running, 0, false);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->slices.front().request->id, 3u);
  EXPECT_EQ(next->slices.front().count, 1);
}

TEST(SchedulerTest, NothingToDoUnlessReleasesArePending) {
  Scheduler sched({64, 256, 1});
  Running running = {Decoding(1, 4, 1)};
  running[0]->in_flight = 1;
  EXPECT_FALSE(sched.Plan(running, 0, false).has_value());
  auto releases_only = sched.Plan(running, 0, true);
  ASSERT_TRUE(releases_only.has_value());
  EXPECT_TRUE(releases_only->slices.empty());
  // Done requests are never planned.
  running[0]->in_flight = 0;
  running[0]->state = RequestState::kDone;
  EXPECT_FALSE(sched.Plan(running, 0, false).has_value());
}

TEST(StepFrameTest, CarriesIdsSamplingOnTheFirstSliceAndReleases) {
  auto r = MakeRequest(9, 6);
  r->state = RequestState::kPrefilling;
  r->sampling.temperature = 0.7f;
  r->sampling_proto.set_temperature(0.7f);
  r->top_logprobs = 3;
  StepPlan plan{{{r, 0, 4}}};
  internal::v1::StepFrame f = BuildStepFrame(plan, /*epoch=*/5, /*step_id=*/12, {3, 4});
  EXPECT_EQ(f.epoch(), 5u);
  EXPECT_EQ(f.step_id(), 12u);
  EXPECT_EQ(f.release_size(), 2);
  ASSERT_EQ(f.slices_size(), 1);
  const internal::v1::StepSlice& s = f.slices(0);
  EXPECT_EQ(s.seq_id(), 9u);
  EXPECT_EQ(s.pos0(), 0);
  EXPECT_EQ(s.ids_size(), 4);
  EXPECT_EQ(s.ids(3), r->prompt[3]);
  EXPECT_FALSE(s.sample());  // the chunk does not reach the prompt's end
  EXPECT_TRUE(s.has_sampling());
  EXPECT_FLOAT_EQ(s.sampling().temperature(), 0.7f);
  EXPECT_EQ(s.top_logprobs(), 3);
  // The second chunk reaches the end: it samples, and carries no sampling parameters again.
  StepPlan rest{{{r, 4, 2}}};
  internal::v1::StepFrame g = BuildStepFrame(rest, 5, 13, {});
  EXPECT_TRUE(g.slices(0).sample());
  EXPECT_FALSE(g.slices(0).has_sampling());
}

TEST(StepFrameTest, AScoreSliceNamesTheNextId) {
  auto r = MakeRequest(2, 5, 0, RequestKind::kScore);
  r->return_logits = true;
  internal::v1::StepFrame f = BuildStepFrame(StepPlan{{{r, 0, 3}}}, 1, 1, {});
  EXPECT_TRUE(f.slices(0).score());
  EXPECT_TRUE(f.slices(0).return_logits());
  EXPECT_EQ(f.slices(0).next_id(), r->prompt[3]);
  internal::v1::StepFrame g = BuildStepFrame(StepPlan{{{r, 3, 2}}}, 1, 2, {});
  EXPECT_EQ(g.slices(0).next_id(), -1);
}

// A prompt of 20 tokens whose rows 4..9 are an image of 96x144 pixels (6 blocks) and 12..13 two audio frames.
struct SoftPrompt {
  std::shared_ptr<Request> r = MakeRequest(3, 20);
  std::vector<uint8_t> rgb = std::vector<uint8_t>(96 * 144 * 3, 9);
  std::vector<float> samples = std::vector<float>(2 * 640, 0.25f);
  SoftPrompt() {
    r->state = RequestState::kPrefilling;
    SoftSpan image;
    image.offset = 4;
    image.count = 6;
    image.image = ImageView{96, 144, rgb.data()};
    SoftSpan audio;
    audio.kind = SoftSpan::Kind::kAudio;
    audio.offset = 12;
    audio.count = 2;
    audio.samples = samples.data();
    r->soft = {image, audio};
  }
};

TEST(SchedulerTest, PrefillChunksNeverCutAnImage) {
  SoftPrompt p;
  Scheduler sched({64, /*prefill_chunk=*/3, 1});
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (int i = 0; i < 20 && p.r->sent < p.r->known(); ++i) {
    auto plan = sched.Plan({p.r}, 0, false);
    ASSERT_TRUE(plan.has_value());
    chunks.emplace_back(plan->slices[0].pos0, plan->slices[0].count);
    Scheduler::MarkSent(*plan);
    p.r->in_flight = 0;
  }
  // 0..2, then 3 alone (the next 3 would cut the image), the image whole, then chunks of 3 (audio may be cut).
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 3}, {3, 1}, {4, 6}, {10, 3}, {13, 3}, {16, 3}, {19, 1}};
  EXPECT_EQ(chunks, want);
}

TEST(StepFrameTest, CarriesImageBlocksAndSoftInputs) {
  SoftPrompt p;
  internal::v1::StepFrame f = BuildStepFrame(StepPlan{{{p.r, 4, 9}}}, 1, 1, {}, 640);
  const internal::v1::StepSlice& s = f.slices(0);
  ASSERT_EQ(s.image_blocks_size(), 1);
  EXPECT_EQ(s.image_blocks(0).begin(), 4);
  EXPECT_EQ(s.image_blocks(0).end(), 10);
  ASSERT_EQ(s.soft_inputs_size(), 2);
  EXPECT_EQ(s.soft_inputs(0).offset(), 0);
  EXPECT_EQ(s.soft_inputs(0).count(), 6);
  EXPECT_EQ(s.soft_inputs(0).image().width(), 144);
  EXPECT_EQ(s.soft_inputs(0).image().rgb(), std::string(p.rgb.begin(), p.rgb.end()));
  // Only the audio frame inside the slice (row 12 of the prompt, row 8 of the slice).
  EXPECT_EQ(s.soft_inputs(1).offset(), 8);
  EXPECT_EQ(s.soft_inputs(1).count(), 1);
  EXPECT_EQ(s.soft_inputs(1).audio_samples().size(), 640 * sizeof(float));
  // A text-only slice carries neither.
  internal::v1::StepFrame g = BuildStepFrame(StepPlan{{{p.r, 14, 3}}}, 1, 2, {}, 640);
  EXPECT_EQ(g.slices(0).image_blocks_size(), 0);
  EXPECT_EQ(g.slices(0).soft_inputs_size(), 0);
}

TEST(SchedulerTest, ReplayAfterANewEpochFeedsPromptAndGeneratedTokensFromZero) {
  Scheduler sched({64, /*prefill_chunk=*/256, 1});
  auto r = Decoding(4, 10, 3);  // 10 prompt tokens, 3 generated
  r->sampling.temperature = 0.9f;
  r->sampling_proto.set_temperature(0.9f);
  r->in_flight = 1;  // a step was lost with the fault
  PrepareReplay(*r);
  EXPECT_EQ(r->state, RequestState::kPrefilling);
  EXPECT_EQ(r->in_flight, 0);
  auto plan = sched.Plan({r}, 0, false);
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->slices.size(), 1u);
  internal::v1::StepFrame f = BuildStepFrame(*plan, 2, 1, {});
  const internal::v1::StepSlice& s = f.slices(0);
  EXPECT_EQ(s.pos0(), 0);
  ASSERT_EQ(s.ids_size(), 13);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s.ids(i), r->prompt[i]);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s.ids(10 + i), r->generated[i]);
  EXPECT_TRUE(s.sample());
  // The sampler resumes where it stopped: one draw per token already generated.
  EXPECT_EQ(s.rng_skip(), 3);
}

TEST(SchedulerTest, ReplayClearsAScoreRequestsPartialResults) {
  auto r = MakeRequest(1, 8, 0, RequestKind::kScore);
  r->state = RequestState::kPrefilling;
  r->fed = r->sent = 4;
  r->score_logprobs = {-1.0f, -2.0f, -3.0f};
  PrepareReplay(*r);
  EXPECT_EQ(r->sent, 0);
  EXPECT_TRUE(r->score_logprobs.empty());
}

}  // namespace
}  // namespace layerpipe
