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
  auto r1 = MakeRequest(1, 96), r2 = MakeRequest(2, 96), r3 = MakeRequest(3, 96);
  for (auto& r : {r1, r2, r3}) ASSERT_TRUE(a.Enqueue(r).ok());
  auto first = a.AdmitWaiting();
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0], r1);
  EXPECT_EQ(first[1], r2);
  EXPECT_EQ(a.queued(), 1u);
  EXPECT_EQ(a.stage(1).reserved, 2 * one);
  EXPECT_TRUE(a.AdmitWaiting().empty());  // still no room
  a.Release(*r1);
  auto second = a.AdmitWaiting();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0], r3);
  EXPECT_EQ(a.stage(1).reserved, 2 * one);
}

TEST_F(KvAdmissionTest, WaitingRequestsAreTakenInArrivalOrderWhenTheyFit) {
  const int64_t small = Bytes(2, 4, 100), large = Bytes(2, 4, 600);
  KvAdmission a = Make(1 << 30, large + small);
  auto big1 = MakeRequest(1, 596), big2 = MakeRequest(2, 596), tiny = MakeRequest(3, 96);
  for (auto& r : {big1, big2, tiny}) ASSERT_TRUE(a.Enqueue(r).ok());
  auto admitted = a.AdmitWaiting();
  // big1 fits; big2 does not yet; tiny fits beside big1.
  ASSERT_EQ(admitted.size(), 2u);
  EXPECT_EQ(admitted[0], big1);
  EXPECT_EQ(admitted[1], tiny);
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
  EXPECT_EQ(score->kv_reserved[1], Bytes(2, 4, 200));
}

}  // namespace
}  // namespace layerpipe
