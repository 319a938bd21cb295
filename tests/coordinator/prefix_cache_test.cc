// The coordinator's prefix cache: where prompts are cut and named, which prefix a request starts from
// and which it keeps, what it reserves, eviction, and what a new epoch does to it.
#include "coordinator/scheduling/prefix_cache.h"

#include <gtest/gtest.h>

#include "coordinator/scheduling/kv_admission.h"
#include "coordinator/scheduling/prefix_keys.h"
#include "coordinator/scheduling/scheduler.h"
#include "coordinator/scheduling/step_frame.h"
#include "engine/model/kv_bytes.h"
#include "tests/coordinator/scheduling_test_util.h"

namespace layerpipe {
namespace {

using testing_scheduling::SmallConfig;

// A document of `doc` tokens (the same for every seed) then a question of `question` tokens.
std::shared_ptr<Request> Ask(uint64_t id, int doc, int question, int seed,
                             RequestKind kind = RequestKind::kGenerate) {
  auto r = std::make_shared<Request>();
  r->id = id;
  r->kind = kind;
  for (int i = 0; i < doc; ++i) r->prompt.push_back(2 + i % 97);
  for (int i = 0; i < question; ++i) r->prompt.push_back(500 + (i * 7 + seed * 13) % 400);
  r->max_new_tokens = 4;
  r->prefix_cuts = PrefixCuts(r->prompt, r->soft, 640);
  return r;
}

TEST(PrefixCuts, EveryPageBoundaryBeforeTheLastTokenNamedByEverythingBeforeIt) {
  auto a = Ask(1, 600, 40, 1), b = Ask(2, 600, 40, 2);
  ASSERT_EQ(a->prefix_cuts.size(), 2u);  // 256 and 512; 640 is the prompt's end, always prefilled
  EXPECT_EQ(a->prefix_cuts[0].length, 256);
  EXPECT_EQ(a->prefix_cuts[1].length, 512);
  EXPECT_EQ(a->prefix_cuts[1].digest, b->prefix_cuts[1].digest) << "the same first 512 tokens";
  EXPECT_EQ(PrefixCuts(std::vector<int32_t>(513, 7), {}, 640).size(), 2u);
  EXPECT_EQ(PrefixCuts(std::vector<int32_t>(512, 7), {}, 640).size(), 1u);
  // A token changed in the first page renames every later cut.
  auto c = Ask(3, 600, 40, 1);
  c->prompt[3] = 999;
  c->prefix_cuts = PrefixCuts(c->prompt, c->soft, 640);
  EXPECT_NE(c->prefix_cuts[0].digest, a->prefix_cuts[0].digest);
  EXPECT_NE(c->prefix_cuts[1].digest, a->prefix_cuts[1].digest);
}

TEST(PrefixCuts, NeverInsideAnImageAndNamedByItsPixels) {
  std::vector<int32_t> prompt(800, 5);
  std::vector<uint8_t> pixels(16 * 16 * 3, 9);
  SoftSpan image;
  image.kind = SoftSpan::Kind::kImage;
  image.offset = 200;
  image.count = 100;  // 200..300: the cut at 256 falls inside it
  image.image = ImageView{16, 16, pixels.data()};
  auto cuts = PrefixCuts(prompt, {image}, 640);
  ASSERT_EQ(cuts.size(), 2u);
  EXPECT_EQ(cuts[0].length, 512);
  EXPECT_EQ(cuts[1].length, 768);
  pixels[5] = 10;  // the same ids, another image
  auto other = PrefixCuts(prompt, {image}, 640);
  EXPECT_NE(other[0].digest, cuts[0].digest);
  EXPECT_EQ(PrefixCuts(prompt, {}, 640)[0].length, 256);
}

class PrefixCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(int64_t{1} << 30, int64_t{1} << 30); }
  // Two stages: layers 0-1 (rings) and 2-3 (a ring and the full layer).
  void Make(int64_t capacity, int64_t prefix_budget) {
    std::vector<KvAdmission::Stage> stages(2);
    stages[0].range = {0, 2};
    stages[1].range = {2, 4};
    for (auto& s : stages) s.capacity = capacity;
    admission_ = std::make_unique<KvAdmission>(config_, Precision::kBf16, std::move(stages));
    for (size_t s = 0; s < 2; ++s) admission_->cache().SetBudget(s, prefix_budget);
  }
  std::shared_ptr<Request> Admit(const std::shared_ptr<Request>& r) {
    EXPECT_TRUE(admission_->Enqueue(r).ok());
    auto admitted = admission_->AdmitWaiting();
    if (admitted.empty()) return nullptr;
    EXPECT_EQ(admitted.front(), r);
    r->state = RequestState::kPrefilling;
    running_.push_back(r);
    return r;
  }
  // Plans and "sends" the next step as the pipeline does.
  std::optional<StepPlan> Send() {
    auto plan = scheduler_.Plan(running_, 0, admission_->cache().drops_pending());
    if (!plan) return plan;
    frame_ = BuildStepFrame(*plan, 1, ++step_, {}, 640, admission_->cache().TakeDrops());
    for (const PlannedSlice& s : plan->slices) admission_->cache().OnSent(*s.request, s.pos0 + s.count);
    Scheduler::MarkSent(*plan);
    for (const PlannedSlice& s : plan->slices) {  // and the step comes back
      --s.request->in_flight;
      s.request->fed = s.request->sent;
    }
    return plan;
  }
  void Finish(const std::shared_ptr<Request>& r) {
    admission_->Release(*r);
    running_.erase(std::find(running_.begin(), running_.end(), r));
  }
  int64_t Shared(size_t stage, int64_t cut) {
    const LayerRange range = stage == 0 ? LayerRange{0, 2} : LayerRange{2, 4};
    return KvSharedBytesAtCut(config_, range.begin, range.end, Precision::kBf16, cut);
  }
  int64_t Bytes(size_t stage, int64_t tokens) {
    const LayerRange range = stage == 0 ? LayerRange{0, 2} : LayerRange{2, 4};
    return KvBytesAtLength(config_, range.begin, range.end, Precision::kBf16, tokens);
  }

  const ModelConfig config_ = SmallConfig();
  std::unique_ptr<KvAdmission> admission_;
  Scheduler scheduler_{SchedulerLimits{64, 1000, 4}};
  std::vector<std::shared_ptr<Request>> running_;
  internal::v1::StepFrame frame_;
  uint64_t step_ = 0;
};

TEST_F(PrefixCacheTest, AFirstRequestKeepsItsLastCutAndALaterOneStartsThere) {
  auto r1 = Admit(Ask(1, 600, 40, 1));
  ASSERT_NE(r1, nullptr);
  EXPECT_EQ(r1->prefix_from, nullptr);
  ASSERT_EQ(r1->prefix_saves.size(), 1u);
  EXPECT_EQ(r1->prefix_saves[0]->length, 512);
  // It reserves its sequence less the pages it shares with the prefix; the prefix counts once.
  EXPECT_EQ(r1->kv_reserved[1], Bytes(1, 644) - Shared(1, 512));
  EXPECT_EQ(admission_->cache().bytes(1), Bytes(1, 512));

  // The chunk stops at the cut and keeps the prefix there.
  auto plan = Send();
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->slices[0].count, 512);
  EXPECT_EQ(frame_.slices(0).save_prefix(), r1->prefix_saves[0]->key);
  EXPECT_TRUE(r1->prefix_saves[0]->kept);
  const uint64_t key = r1->prefix_saves[0]->key;
  Send();
  EXPECT_EQ(frame_.slices(0).pos0(), 512);
  EXPECT_EQ(frame_.slices(0).save_prefix(), 0u);

  auto r2 = Admit(Ask(2, 600, 50, 2));
  ASSERT_NE(r2, nullptr);
  ASSERT_NE(r2->prefix_from, nullptr);
  EXPECT_EQ(r2->start(), 512);
  EXPECT_TRUE(r2->prefix_saves.empty()) << "its last cut is the one it starts from";
  EXPECT_EQ(r2->sent, 512);
  EXPECT_EQ(r2->kv_reserved[1], Bytes(1, 654) - Shared(1, 512));
  r1->state = RequestState::kDecoding;  // out of the way
  r1->sent = r1->known();
  plan = Send();
  ASSERT_TRUE(plan);
  EXPECT_EQ(frame_.slices(0).seq_id(), 2u);
  EXPECT_EQ(frame_.slices(0).pos0(), 512);
  EXPECT_EQ(frame_.slices(0).prefix_from(), key);
  EXPECT_TRUE(frame_.slices(0).has_sampling()) << "the last stage learns the sampling with the first slice";
}

TEST_F(PrefixCacheTest, ALaterRequestWaitsForAPrefixBeingMadeAndTakesOverIfItsMakerEnds) {
  auto r1 = Admit(Ask(1, 600, 40, 1));
  auto r2 = Admit(Ask(2, 600, 50, 2));
  ASSERT_NE(r2, nullptr);
  ASSERT_EQ(r2->prefix_from, r1->prefix_saves[0]) << "it starts from the prefix r1 is making";
  EXPECT_FALSE(r2->prefix_from->kept);
  // While r1 has not sent the slice that keeps it, r2 is not planned.
  auto plan = scheduler_.Plan(running_, 0, false);
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->slices.size(), 1u);
  EXPECT_EQ(plan->slices[0].request, r1);

  // r1 is cancelled before it got there: r2 makes the prefix itself, from 0, reserving the same bytes.
  const auto reserved = r2->kv_reserved;
  auto entry = r2->prefix_from;
  Finish(r1);
  EXPECT_EQ(r2->prefix_from, nullptr);
  ASSERT_EQ(r2->prefix_saves.size(), 1u);
  EXPECT_EQ(r2->prefix_saves[0], entry);
  EXPECT_EQ(entry->maker, r2.get());
  EXPECT_EQ(r2->sent, 0);
  EXPECT_EQ(r2->kv_reserved, reserved);
  EXPECT_EQ(admission_->cache().entries(), 1u);
  Send();
  EXPECT_EQ(frame_.slices(0).seq_id(), 2u);
  EXPECT_EQ(frame_.slices(0).pos0(), 0);
  EXPECT_EQ(frame_.slices(0).ids_size(), 512);
  EXPECT_EQ(frame_.slices(0).save_prefix(), entry->key);
  EXPECT_TRUE(frame_.slices(0).has_sampling());
}

TEST_F(PrefixCacheTest, APrefixNobodyFinishedMakingIsForgotten) {
  auto r1 = Admit(Ask(1, 600, 40, 1));
  Finish(r1);
  EXPECT_EQ(admission_->cache().entries(), 0u);
  EXPECT_EQ(admission_->cache().bytes(0), 0);
  EXPECT_FALSE(admission_->cache().drops_pending()) << "no stage ever held it";
}

TEST_F(PrefixCacheTest, WherePromptsDivergeIsKeptForTheNextOne) {
  // A 300-token document: r1's only cut inside it (256) is not its last (512).
  auto r1 = Admit(Ask(1, 300, 300, 1));
  ASSERT_EQ(r1->prefix_saves.size(), 1u);
  EXPECT_EQ(r1->prefix_saves[0]->length, 512);
  auto r2 = Admit(Ask(2, 300, 300, 2));
  EXPECT_EQ(r2->prefix_from, nullptr) << "nothing kept at 256 yet";
  ASSERT_EQ(r2->prefix_saves.size(), 2u);
  EXPECT_EQ(r2->prefix_saves[0]->length, 256) << "r1 went this far with it";
  EXPECT_EQ(r2->prefix_saves[1]->length, 512);
  auto r3 = Admit(Ask(3, 300, 300, 3));
  ASSERT_NE(r3->prefix_from, nullptr);
  EXPECT_EQ(r3->start(), 256);
}

TEST_F(PrefixCacheTest, AScoreRequestNeverStartsFromAPrefix) {
  auto r1 = Admit(Ask(1, 600, 40, 1));
  auto s = Admit(Ask(2, 600, 40, 2, RequestKind::kScore));
  EXPECT_EQ(s->prefix_from, nullptr) << "it needs every position's log-probabilities";
  EXPECT_EQ(s->start(), 0);
  EXPECT_TRUE(s->prefix_saves.empty()) << "its one cut is kept already";
}

TEST_F(PrefixCacheTest, UnusedPrefixesAreEvictedForARequestThatNeedsTheirRoom) {
  // Room for one sequence of 1000 tokens and not much more on stage 1.
  const int64_t one = Bytes(1, 1004);
  Make(one + Bytes(1, 512), int64_t{1} << 30);
  auto r1 = Admit(Ask(1, 600, 40, 1));
  Send();
  const uint64_t key = r1->prefix_saves[0]->key;
  Finish(r1);
  EXPECT_EQ(admission_->cache().entries(), 1u) << "kept after its maker finished";
  // An unrelated long request does not fit beside the prefix: the prefix goes, the request comes in.
  auto big = Ask(2, 0, 1000, 5);
  big->prompt.assign(1000, 3);
  big->prefix_cuts = PrefixCuts(big->prompt, {}, 640);
  ASSERT_NE(Admit(big), nullptr);
  EXPECT_EQ(admission_->cache().evictions(), 1);
  auto drops = admission_->cache().TakeDrops();
  EXPECT_EQ(drops, (std::vector<uint64_t>{key}));
  ASSERT_EQ(big->prefix_saves.size(), 1u) << "its own prefix fits where the old one was";
  EXPECT_EQ(big->prefix_saves[0]->length, 768);
}

TEST_F(PrefixCacheTest, APrefixInUseIsNeverEvicted) {
  auto r1 = Admit(Ask(1, 600, 40, 1));
  Send();
  auto r2 = Admit(Ask(2, 600, 50, 2));  // starts from r1's prefix
  Finish(r1);
  admission_->cache().EvictUntil([] { return false; }, nullptr);
  EXPECT_EQ(admission_->cache().entries(), 1u);
  EXPECT_EQ(admission_->cache().evictions(), 0);
  Finish(r2);
  admission_->cache().EvictUntil([] { return false; }, nullptr);
  EXPECT_EQ(admission_->cache().entries(), 0u);
  EXPECT_EQ(admission_->cache().bytes(1), 0);
}

TEST_F(PrefixCacheTest, NothingIsKeptOverTheBudgetOrWithTheCacheOff) {
  Make(int64_t{1} << 30, Bytes(1, 256));
  auto r1 = Admit(Ask(1, 600, 40, 1));
  EXPECT_TRUE(r1->prefix_saves.empty()) << "512 tokens of prefix are over the budget";
  Make(int64_t{1} << 30, int64_t{1} << 30);
  admission_->cache().SetBudget(1, 0);
  EXPECT_FALSE(admission_->cache().enabled());
  auto r2 = Admit(Ask(2, 600, 40, 1));
  EXPECT_TRUE(r2->prefix_saves.empty());
  EXPECT_EQ(r2->kv_reserved[1], Bytes(1, 644));
}

TEST_F(PrefixCacheTest, ANewEpochForgetsUnusedPrefixesAndHasUsedOnesMadeAgain) {
  auto r1 = Admit(Ask(1, 600, 40, 1));
  Send();
  Finish(r1);
  auto other = Admit(Ask(2, 0, 600, 1));  // keeps 512 of another prompt
  Send();
  Finish(other);
  auto r3 = Admit(Ask(3, 600, 50, 3));  // starts from r1's prefix
  ASSERT_EQ(r3->start(), 512);
  auto entry = r3->prefix_from;
  EXPECT_EQ(admission_->cache().entries(), 2u);

  admission_->cache().OnNewEpoch(running_);
  PrepareReplay(*r3);
  EXPECT_EQ(admission_->cache().entries(), 1u) << "the one nobody uses is forgotten";
  EXPECT_FALSE(admission_->cache().drops_pending()) << "the new epoch's stages hold nothing";
  EXPECT_FALSE(entry->kept);
  EXPECT_EQ(entry->maker, r3.get()) << "its one user makes it again";
  EXPECT_EQ(r3->start(), 0);
  EXPECT_EQ(r3->sent, 0);
  Send();
  EXPECT_EQ(frame_.slices(0).pos0(), 0);
  EXPECT_EQ(frame_.slices(0).save_prefix(), entry->key);
  EXPECT_EQ(frame_.slices(0).prefix_from(), 0u);
}

TEST_F(PrefixCacheTest, AStageThatComesBackWithoutACacheTurnsItOff) {
  auto r1 = Admit(Ask(1, 600, 40, 1));
  Send();
  auto r2 = Admit(Ask(2, 600, 50, 2));
  ASSERT_EQ(r2->start(), 512);
  admission_->cache().OnNewEpoch(running_);
  admission_->cache().SetBudget(1, 0);  // the replacement worker keeps no prefixes
  admission_->TurnCacheOff(running_);
  EXPECT_EQ(admission_->cache().entries(), 0u);
  for (const auto& r : {r1, r2}) {
    EXPECT_EQ(r->prefix_from, nullptr);
    EXPECT_TRUE(r->prefix_saves.empty());
    EXPECT_EQ(r->sent, 0);
    EXPECT_EQ(r->kv_reserved, r->kv_need) << "its whole sequence, alone";
  }
  Send();
  EXPECT_EQ(frame_.slices(0).prefix_from(), 0u);
  EXPECT_EQ(frame_.slices(0).save_prefix(), 0u);
  Finish(r1);
  Finish(r2);
  EXPECT_EQ(admission_->stage(1).reserved, 0) << "what it reserved again is given back";
}

}  // namespace
}  // namespace layerpipe
