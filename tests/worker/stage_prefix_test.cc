// A stage starts a new sequence from a prefix it keeps (StepSlice.prefix_from) and keeps one when a slice
// asks (save_prefix): the logits are those of a sequence that ran the whole prompt, bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/cpu/cpu_backend.h"
#include "engine/model/weights.h"
#include "tests/engine/test_util.h"
#include "worker/stage.h"

namespace layerpipe {
namespace {

class StagePrefixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing_util::MakeCheckpoint("stage_prefix", testing_util::SmallModel());
    auto config = LoadModelConfig(dir_);
    ASSERT_TRUE(config.ok());
    auto w = ModelWeights::Load(dir_, *config, {0, config->num_layers, true, true});
    ASSERT_TRUE(w.ok()) << w.status();
    weights_ = std::shared_ptr<const ModelWeights>(std::move(*w));
    StageOptions o;
    o.first = o.last = true;
    o.precision = Precision::kFp32;
    o.kv_budget_bytes = int64_t{1} << 30;
    o.prefix_cache_bytes = int64_t{1} << 28;
    stage_ = std::make_unique<Stage>(weights_, o, std::make_unique<CpuBackend>(*weights_, o.precision, pool_));
  }

  // Runs one slice; returns its logits (return_logits) or the error.
  absl::StatusOr<std::vector<float>> Run(uint64_t seq, int64_t pos0, const std::vector<int32_t>& ids,
                                         uint64_t prefix_from = 0, uint64_t save_prefix = 0) {
    internal::v1::StepFrame f;
    f.set_epoch(1);
    f.set_step_id(++step_);
    internal::v1::StepSlice* s = f.add_slices();
    s->set_seq_id(seq);
    s->set_pos0(pos0);
    for (int32_t id : ids) s->add_ids(id);
    s->set_return_logits(true);
    s->set_prefix_from(prefix_from);
    s->set_save_prefix(save_prefix);
    internal::v1::StepResult result;
    if (auto st = stage_->Run(f, StageInput{}, nullptr, &result); !st.ok()) return st;
    const auto& logits = result.results(0).logits();
    return std::vector<float>(logits.begin(), logits.end());
  }

  std::string dir_;
  ThreadPool pool_{1};
  std::shared_ptr<const ModelWeights> weights_;
  std::unique_ptr<Stage> stage_;
  uint64_t step_ = 0;
};

TEST_F(StagePrefixTest, ASequenceFromAKeptPrefixEqualsOneThatRanIt) {
  std::vector<int32_t> prefix(40), suffix = {7, 8, 9, 10, 11};
  for (size_t i = 0; i < prefix.size(); ++i) prefix[i] = 3 + static_cast<int32_t>((i * 31) % 290);
  ASSERT_TRUE(Run(1, 0, prefix, 0, /*save_prefix=*/77).ok());
  EXPECT_EQ(stage_->prefixes().size(), 1u);
  auto from_prefix = Run(2, static_cast<int64_t>(prefix.size()), suffix, /*prefix_from=*/77);
  ASSERT_TRUE(from_prefix.ok()) << from_prefix.status();
  std::vector<int32_t> whole = prefix;
  whole.insert(whole.end(), suffix.begin(), suffix.end());
  auto ran_it = Run(3, 0, whole);
  ASSERT_TRUE(ran_it.ok());
  const size_t V = static_cast<size_t>(weights_->config().vocab_size);
  ASSERT_EQ(from_prefix->size(), suffix.size() * V);
  EXPECT_EQ(std::memcmp(from_prefix->data(), ran_it->data() + prefix.size() * V, from_prefix->size() * sizeof(float)), 0);
  EXPECT_EQ(stage_->SequenceLength(2), static_cast<int64_t>(whole.size()));
}

TEST_F(StagePrefixTest, BadPrefixReferencesAreRefusedLeavingNothingBehind) {
  ASSERT_TRUE(Run(1, 0, {2, 5, 6, 7}, 0, 77).ok());
  auto missing = Run(2, 4, {8}, /*prefix_from=*/78);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(missing.status().message(), "stage 0 keeps no prefix 78 for sequence 2");
  auto wrong_pos = Run(2, 3, {8}, 77);
  EXPECT_EQ(wrong_pos.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong_pos.status().message().find("prefix 77 holds 4 tokens"), std::string::npos) << wrong_pos.status();
  auto held = Run(1, 4, {8}, 77);
  EXPECT_NE(held.status().message().find("already held"), std::string::npos) << held.status();
  EXPECT_EQ(stage_->SequenceLength(2), -1);
  EXPECT_EQ(stage_->SequenceLength(1), 4);
}

}  // namespace
}  // namespace layerpipe
