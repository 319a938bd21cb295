#include "coordinator/scheduling/kv_admission.h"

#include <gtest/gtest.h>

#include "engine/model/kv_bytes.h"
#include "tests/coordinator/scheduling_test_util.h"

namespace layerpipe {
namespace {

using testing_scheduling::MakeRequest;
using testing_scheduling::SmallConfig;

class KvAdmissionTest : public ::testing::Test {
 protected:
  // Two stages: layers 0-1 (sliding rings only) and 2-3 (a ring and a paged full layer).
  KvAdmission Make(int64_t capacity0, int64_t capacity1) {
    std::vector<KvAdmission::Stage> stages(2);
    stages[0].address = "w0:1";
    stages[0].range = {0, 2};
    stages[0].capacity = capacity0;
    stages[1].address = "w1:1";
    stages[1].range = {2, 4};
    stages[1].capacity = capacity1;
    return KvAdmission(config_, Precision::kBf16, std::move(stages));
  }
  static void EnqueueAll(KvAdmission& a, const std::vector<std::shared_ptr<Request>>& requests) {
    for (const auto& r : requests) ASSERT_TRUE(a.Enqueue(r).ok()) << r->id;
  }
  static std::vector<uint64_t> Ids(const std::vector<std::shared_ptr<Request>>& requests) {
    std::vector<uint64_t> ids;
    for (const auto& r : requests) ids.push_back(r->id);
    return ids;
  }
  int64_t Bytes(int begin, int end, int64_t tokens) {
    return KvBytesAtLength(config_, begin, end, Precision::kBf16, tokens);
  }
  const ModelConfig config_ = SmallConfig();
};

TEST_F(KvAdmissionTest, NeedIsTheWholeSequenceOnEveryStage) {
  KvAdmission a = Make(1 << 30, 1 << 30);
  auto need = a.Need(300);
  ASSERT_TRUE(need.ok()) << need.status();
  EXPECT_EQ((*need)[0], Bytes(0, 2, 300));
  EXPECT_EQ((*need)[1], Bytes(2, 4, 300));
  // 300 positions take two pages of the full layer, the rings their whole window.
  EXPECT_EQ((*need)[1], 8 * 2 * 32 * 2 + 2 * 256 * 2 * 32 * 2);
}

TEST_F(KvAdmissionTest, ARequestThatCanNeverFitIsRefusedWithTheNumbers) {
  KvAdmission a = Make(1 << 30, Bytes(2, 4, 256));
  auto r = MakeRequest(1, 250, 10);  // 260 positions: a second page on stage 1
  absl::Status st = a.Enqueue(r);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("stage 1 (w1:1, layers 2-3)"), std::string::npos) << st;
  EXPECT_NE(st.message().find("260 tokens"), std::string::npos) << st;
  EXPECT_EQ(a.queued(), 0u);
  // One that fits the capacity exactly is taken.
  EXPECT_TRUE(a.Enqueue(MakeRequest(2, 250, 6)).ok());
  EXPECT_EQ(a.AdmitWaiting().size(), 1u);
}

TEST_F(KvAdmissionTest, ARequestThatFitsLaterWaitsAndIsAdmittedOnRelease) {
  const int64_t one = Bytes(2, 4, 100);
  KvAdmission a = Make(1 << 30, 2 * one);
  auto r1 = MakeRequest(1, 96);
  EnqueueAll(a, {r1, MakeRequest(2, 96), MakeRequest(3, 96)});
  EXPECT_EQ(Ids(a.AdmitWaiting()), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(a.queued(), 1u);
  EXPECT_EQ(a.stage(1).reserved, 2 * one);
  EXPECT_TRUE(a.AdmitWaiting().empty());  // still no room
  a.Release(*r1);
  EXPECT_EQ(Ids(a.AdmitWaiting()), (std::vector<uint64_t>{3}));
  EXPECT_EQ(a.stage(1).reserved, 2 * one);
}

TEST_F(KvAdmissionTest, WaitingRequestsAreTakenInArrivalOrderWhenTheyFit) {
  const int64_t small = Bytes(2, 4, 100), large = Bytes(2, 4, 600);
  KvAdmission a = Make(1 << 30, large + small);
  EnqueueAll(a, {MakeRequest(1, 596), MakeRequest(2, 596), MakeRequest(3, 96)});
  // The first large one fits; the second does not yet; the small one fits beside the first.
  EXPECT_EQ(Ids(a.AdmitWaiting()), (std::vector<uint64_t>{1, 3}));
}

TEST_F(KvAdmissionTest, ALargeRequestIsPassedOnlyABoundedNumberOfTimes) {
  // Stage 1 has room for the large request alone, or for two small ones at a time.
  const int64_t small = Bytes(2, 4, 100), large = Bytes(2, 4, 1000);
  ASSERT_GE(large, 2 * small);
  std::vector<KvAdmission::Stage> stages = {{"w0:1", {0, 2}, 1 << 30}, {"w1:1", {2, 4}, large}};
  KvAdmission a(config_, Precision::kBf16, stages, /*max_bypass=*/3);
  auto running = MakeRequest(1, 96);
  EnqueueAll(a, {running});
  ASSERT_EQ(Ids(a.AdmitWaiting()), (std::vector<uint64_t>{1}));
  auto big = MakeRequest(2, 996);
  EnqueueAll(a, {big});
  // Small requests keep coming, one starting as the last finishes: each fits, the large one never does.
  for (uint64_t id = 10; id < 13; ++id) {
    auto next = MakeRequest(id, 96);
    EnqueueAll(a, {next});
    EXPECT_EQ(Ids(a.AdmitWaiting()), (std::vector<uint64_t>{id}));
    a.Release(*running);
    running = next;
  }
  EXPECT_EQ(big->bypassed, 3);
  // Passed three times: now it holds the ones behind it...
  EnqueueAll(a, {MakeRequest(20, 96)});
  EXPECT_TRUE(a.AdmitWaiting().empty());
  // ...and is admitted as soon as the running one finishes.
  a.Release(*running);
  EXPECT_EQ(Ids(a.AdmitWaiting()), (std::vector<uint64_t>{2}));
  EXPECT_EQ(a.queued(), 1u);
}

TEST_F(KvAdmissionTest, NothingIsAdmittedWhileAStageDrains) {
  KvAdmission a = Make(1 << 30, 1 << 30);
  ASSERT_TRUE(a.Enqueue(MakeRequest(1, 10)).ok());
  a.SetDraining(1, true);
  EXPECT_TRUE(a.paused());
  EXPECT_TRUE(a.AdmitWaiting().empty());
  a.SetDraining(1, false);
  EXPECT_EQ(a.AdmitWaiting().size(), 1u);
}

TEST_F(KvAdmissionTest, WithdrawAndTakeQueue) {
  KvAdmission b = Make(1 << 30, 1 << 30);
  auto r1 = MakeRequest(1, 10), r2 = MakeRequest(2, 10);
  b.SetDraining(0, true);  // keeps both waiting
  ASSERT_TRUE(b.Enqueue(r1).ok());
  ASSERT_TRUE(b.Enqueue(r2).ok());
  EXPECT_TRUE(b.Withdraw(r1));
  EXPECT_FALSE(b.Withdraw(r1));
  auto rest = b.TakeQueue();
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0], r2);
  EXPECT_EQ(b.queued(), 0u);
}

TEST_F(KvAdmissionTest, AScoreRequestNeedsOnlyItsPrompt) {
  KvAdmission a = Make(1 << 30, 1 << 30);
  auto score = MakeRequest(1, 200, /*max_new_tokens=*/500, RequestKind::kScore);
  ASSERT_TRUE(a.Enqueue(score).ok());
  EXPECT_EQ(score->kv_need[1], Bytes(2, 4, 200));
  ASSERT_EQ(a.AdmitWaiting().size(), 1u);
  EXPECT_EQ(score->kv_reserved[1], Bytes(2, 4, 200));
}

}  // namespace
}  // namespace layerpipe
