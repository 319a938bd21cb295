// A stage starts a new sequence from a prefix it keeps (StepSlice.prefix_from) and keeps one when a slice
// asks (save_prefix): the logits are those of a sequence that ran the whole prompt, bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/cpu/cpu_backend.h"
#include "engine/model/kv_bytes.h"
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

  // Runs one slice; returns its logits (return_logits) or the error. With `sampling`, the slice samples
  // instead and returns {token}.
  absl::StatusOr<std::vector<float>> Run(uint64_t seq, int64_t pos0, const std::vector<int32_t>& ids,
                                         uint64_t prefix_from = 0, uint64_t save_prefix = 0,
                                         const v1::SamplingParams* sampling = nullptr) {
    internal::v1::StepFrame f;
    f.set_epoch(1);
    f.set_step_id(++step_);
    internal::v1::StepSlice* s = f.add_slices();
    s->set_seq_id(seq);
    s->set_pos0(pos0);
    for (int32_t id : ids) s->add_ids(id);
    if (sampling != nullptr) {
      s->set_sample(true);
      *s->mutable_sampling() = *sampling;
    } else {
      s->set_return_logits(true);
    }
    s->set_prefix_from(prefix_from);
    s->set_save_prefix(save_prefix);
    internal::v1::StepResult result;
    if (auto st = stage_->Run(f, StageInput{}, nullptr, &result); !st.ok()) return st;
    if (sampling != nullptr) return std::vector<float>{static_cast<float>(result.results(0).token())};
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

TEST_F(StagePrefixTest, PagesSharedWithAKeptPrefixCountOnce) {
  const ModelConfig& c = weights_->config();
  auto bytes = [&](int64_t n) { return KvBytesAtLength(c, 0, c.num_layers, Precision::kFp32, n); };
  auto shared = [&](int64_t n) { return KvSharedBytesAtCut(c, 0, c.num_layers, Precision::kFp32, n); };
  ASSERT_GT(shared(256), 0) << "the model needs a full layer for this test";
  std::vector<int32_t> prefix(256, 5);
  ASSERT_TRUE(Run(1, 0, prefix, 0, 77).ok());
  // The sequence's pages below the cut are the prefix's now: counted there, not twice.
  EXPECT_EQ(stage_->prefix_bytes(), bytes(256));
  EXPECT_EQ(stage_->kv_bytes_used(), bytes(256) - shared(256));
  ASSERT_TRUE(Run(2, 256, {6, 7, 8}, 77).ok());
  EXPECT_EQ(stage_->kv_bytes_used(), 2 * (bytes(256) - shared(256)) + bytes(259) - bytes(256));
  google::protobuf::RepeatedField<uint64_t> ids;
  ids.Add(1);
  ids.Add(2);
  stage_->Release(ids);
  EXPECT_EQ(stage_->kv_bytes_used(), 0);
  EXPECT_EQ(stage_->prefix_bytes(), bytes(256)) << "kept after its sequences are gone";
  google::protobuf::RepeatedField<uint64_t> keys;
  keys.Add(77);
  keys.Add(12345);  // not kept: ignored
  stage_->DropPrefixes(keys);
  EXPECT_EQ(stage_->prefix_bytes(), 0);
  EXPECT_EQ(stage_->prefixes().size(), 0u);
}

TEST_F(StagePrefixTest, TheBudgetCheckCountsAKeptPrefixOnce) {
  const ModelConfig& c = weights_->config();
  const int64_t whole = KvBytesAtLength(c, 0, c.num_layers, Precision::kFp32, 300);
  const int64_t kept = KvBytesAtLength(c, 0, c.num_layers, Precision::kFp32, 256);
  const int64_t shared = KvSharedBytesAtCut(c, 0, c.num_layers, Precision::kFp32, 256);
  // Exactly what the coordinator reserves for a 300-token sequence that keeps its first 256.
  StageOptions o = stage_->options();
  o.kv_budget_bytes = whole - shared + kept;
  stage_ = std::make_unique<Stage>(weights_, o, std::make_unique<CpuBackend>(*weights_, o.precision, pool_));
  std::vector<int32_t> ids(256, 5);
  ASSERT_TRUE(Run(1, 0, ids, 0, 77).ok());
  auto rest = Run(1, 256, std::vector<int32_t>(44, 6));
  ASSERT_TRUE(rest.ok()) << rest.status();
  auto over = Run(1, 300, std::vector<int32_t>(213, 7));  // 513 positions: a third page
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted) << over.status();
}

TEST_F(StagePrefixTest, TheLastStageKeepsThePrefixsIdsForTheRepetitionPenalty) {
  // Nearly every id of the vocabulary in the prefix: with a huge penalty the greedy token must be one of
  // the few it lacks, which only a stage that remembers the prefix's ids knows.
  std::vector<int32_t> prefix;
  for (int32_t id = 3; id < 290; ++id) prefix.push_back(id);
  v1::SamplingParams sampling;
  sampling.set_temperature(0);
  sampling.set_repetition_penalty(1000);
  ASSERT_TRUE(Run(1, 0, prefix, 0, 77).ok());
  auto from_prefix = Run(2, static_cast<int64_t>(prefix.size()), {290}, 77, 0, &sampling);
  ASSERT_TRUE(from_prefix.ok()) << from_prefix.status();
  std::vector<int32_t> whole = prefix;
  whole.push_back(290);
  auto ran_it = Run(3, 0, whole, 0, 0, &sampling);
  ASSERT_TRUE(ran_it.ok());
  EXPECT_EQ(*from_prefix, *ran_it);
  const int32_t token = static_cast<int32_t>((*ran_it)[0]);
  EXPECT_TRUE(token < 3 || token >= 290) << "the penalty kept it out of the prefix's ids: " << token;
}

}  // namespace
}  // namespace layerpipe
