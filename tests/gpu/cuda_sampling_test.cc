// Sampling on the device: the CUDA backend's LogitRowSummary of each row must be the host reference's
// summary (engine/sampling/logit_summary.h) of the very logits the device computed — same ids, values and order,
// log Σ exp to rounding — so a Sampler picks the same token from either. Rows include exact ties
// (a zero hidden row gives all-zero logits; a huge one saturates the softcap), NaN rows, the repetition
// penalty, and a checkpoint with Gemma's 262,144-id vocabulary, where the banned ids live. Label "gpu".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/cuda/cuda_backend.h"
#include "engine/sampling/logit_summary.h"
#include "engine/sampling/sampler.h"
#include "tests/engine/test_util.h"

namespace layerpipe {
namespace {

RandomCheckpointOptions GemmaVocabModel() {
  RandomCheckpointOptions o = testing_util::SmallModel();
  o.layers = 2;
  o.vocab = 262144;
  o.seed = 11;
  return o;
}

void ExpectSameEntries(const std::vector<ScoredId>& got, const std::vector<ScoredId>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].id, want[i].id) << what << " entry " << i;
    EXPECT_EQ(got[i].value, want[i].value) << what << " entry " << i;
    EXPECT_EQ(std::isnan(got[i].raw), std::isnan(want[i].raw)) << what << " entry " << i;
    if (!std::isnan(want[i].raw)) EXPECT_EQ(got[i].raw, want[i].raw) << what << " entry " << i;
  }
}

class CudaSamplingTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
    const bool gemma_vocab = GetParam();
    const std::string dir = testing_util::MakeCheckpoint(gemma_vocab ? "cuda_sampling_gemma" : "cuda_sampling",
                                                         gemma_vocab ? GemmaVocabModel() : testing_util::SmallModel());
    auto config = LoadModelConfig(dir);
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
    auto w = ModelWeights::Load(dir, config_, {0, config_.num_layers, true, true});
    ASSERT_TRUE(w.ok()) << w.status();
    weights_ = std::move(*w);
    auto gpu = MakeCudaBackend(*weights_, Precision::kBf16, 0);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
  }

  // Hidden rows: ordinary random ones, then the awkward ones.
  std::vector<float> Rows(int* rows) {
    const int64_t H = config_.hidden_size;
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> h;
    for (int r = 0; r < 6; ++r) {
      for (int64_t i = 0; i < H; ++i) h.push_back(normal(rng));
    }
    h.insert(h.end(), H, 0.0f);  // all logits exactly 0: ties everywhere
    // One-hot: each logit is one bf16 embedding entry times a constant, so equal entries tie exactly.
    h.push_back(1.0f);
    h.insert(h.end(), H - 1, 0.0f);
    h.insert(h.end(), H, std::numeric_limits<float>::quiet_NaN());  // every logit NaN
    *rows = static_cast<int>(h.size() / H);
    return h;
  }

  ModelConfig config_;
  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<LayerBackend> gpu_;
};

TEST_P(CudaSamplingTest, DeviceSummariesEqualTheHostSummaryOfTheDeviceLogits) {
  const int64_t V = config_.vocab_size;
  int rows = 0;
  const std::vector<float> hidden = Rows(&rows);
  std::vector<int32_t> penalized;
  for (int32_t id = 1; id < V; id += 7) penalized.push_back(id);
  const int bests[] = {1, 40, kMaxSummaryBest};
  const int tops[] = {0, 5, 20};
  std::vector<LogitRowRequest> requests(rows);
  for (int r = 0; r < rows; ++r) {
    requests[r].best = bests[r % 3];
    requests[r].top_raw = tops[(r / 3) % 3];
    requests[r].repetition_penalty = r % 2 ? 1.3f : 1.0f;
    requests[r].penalized_ids = penalized;
    // Every other row also draws a token over the whole row (plain temperature sampling).
    requests[r].draw = r % 2 == 0;
    requests[r].u = (r + 0.5) / rows;
    requests[r].temperature = 0.5f + 0.25f * r;
    requests[r].min_p = r % 4 == 0 ? 0.0f : 0.01f;
    requests[r].total_mass = r % 3 == 0;  // top-p's total
  }
  std::vector<float> logits(static_cast<size_t>(rows * V));
  ASSERT_TRUE(gpu_->Logits(hidden.data(), rows, logits.data()).ok());
  std::vector<LogitRowSummary> got;
  absl::Status st = gpu_->SummarizeLogits(hidden.data(), requests, &got);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(got.size(), static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    SCOPED_TRACE(::testing::Message() << "row " << r);
    const LogitRowSummary want =
        SummarizeLogitRow({logits.data() + r * V, static_cast<size_t>(V)}, requests[r]);
    ExpectSameEntries(got[r].best, want.best, "best");
    ExpectSameEntries(got[r].top_raw, want.top_raw, "top_raw");
    EXPECT_EQ(got[r].fallback_id, want.fallback_id);
    // Same weights; only the draw's running sums are grouped differently, which could move it only if
    // u landed within a few ulps of a boundary between two tokens' cumulative weights.
    EXPECT_EQ(got[r].drawn, want.drawn);
    // The device computes each weight with the host's operations, and a bucket's partial sums are
    // exact, so the total is the host's bit for bit.
    EXPECT_EQ(got[r].total_mass, want.total_mass);
    if (std::isfinite(want.log_sum_exp)) {
      EXPECT_NEAR(got[r].log_sum_exp, want.log_sum_exp, 1e-9 * std::max(1.0, std::abs(want.log_sum_exp)));
    } else {
      EXPECT_EQ(got[r].log_sum_exp, want.log_sum_exp);
    }
  }
  // The awkward rows are what they are meant to be.
  EXPECT_EQ(got[6].best.size(), static_cast<size_t>(requests[6].best));
  EXPECT_EQ(got[6].best.front().value, 0.0f);
  EXPECT_TRUE(got[rows - 1].best.empty());
  EXPECT_EQ(got[rows - 1].fallback_id, 0);
}

TEST_P(CudaSamplingTest, SamplersPickTheSameTokensFromDeviceSummaries) {
  const int64_t V = config_.vocab_size;
  int rows = 0;
  const std::vector<float> hidden = Rows(&rows);
  std::vector<float> logits(static_cast<size_t>(rows * V));
  ASSERT_TRUE(gpu_->Logits(hidden.data(), rows, logits.data()).ok());
  const std::vector<int32_t> history = {3, 9, 9, 27, 100, 5};
  for (const SamplingParams& params :
       {SamplingParams{.temperature = 0}, SamplingParams{.temperature = 0, .repetition_penalty = 1.5f},
        SamplingParams{.temperature = 0.8f, .top_k = 50, .top_p = 0.9f, .seed = 3},
        SamplingParams{.temperature = 1.5f, .top_k = kMaxSummaryBest, .min_p = 0.01f, .repetition_penalty = 1.2f,
                       .seed = 8},
        SamplingParams{.temperature = 1.0f, .seed = 9},
        SamplingParams{.temperature = 0.7f, .min_p = 0.05f, .repetition_penalty = 1.2f, .seed = 10},
        SamplingParams{.temperature = 0.9f, .top_p = 0.9f, .seed = 11},
        SamplingParams{.temperature = 1.3f, .top_p = 0.7f, .min_p = 0.01f, .repetition_penalty = 1.1f, .seed = 12}}) {
    Sampler whole(params, static_cast<int>(V)), summarised(params, static_cast<int>(V));
    // One row at a time, as a sequence's steps come: a whole-row draw uses the stream's next uniform.
    for (int r = 0; r < rows; ++r) {
      std::vector<int32_t> ids;
      LogitRowRequest q;
      ASSERT_TRUE(summarised.FillRequest(history, &q, &ids));
      std::vector<LogitRowSummary> summaries;
      ASSERT_TRUE(gpu_->SummarizeLogits(hidden.data() + r * config_.hidden_size, {&q, 1}, &summaries).ok());
      const absl::Span<const float> row(logits.data() + r * V, static_cast<size_t>(V));
      int32_t token = -1;
      if (!summarised.SampleFromSummary(summaries[0], &token)) token = summarised.Sample(row, history);
      EXPECT_EQ(token, whole.Sample(row, history)) << "row " << r << " temperature " << params.temperature;
    }
  }
}

TEST_P(CudaSamplingTest, BadRequestsAreRejected) {
  const std::vector<float> hidden(config_.hidden_size, 0.5f);
  std::vector<LogitRowSummary> out;
  LogitRowRequest too_many{.best = kMaxSummaryBest + 1};
  EXPECT_EQ(gpu_->SummarizeLogits(hidden.data(), {&too_many, 1}, &out).code(), absl::StatusCode::kInvalidArgument);
  const int32_t outside[] = {static_cast<int32_t>(config_.vocab_size)};
  LogitRowRequest bad_id{.best = 1, .repetition_penalty = 1.1f, .penalized_ids = outside};
  EXPECT_EQ(gpu_->SummarizeLogits(hidden.data(), {&bad_id, 1}, &out).code(), absl::StatusCode::kInvalidArgument);
  // And the backend still serves.
  LogitRowRequest cold{.draw = true, .u = 0.5, .temperature = 0.0f};
  EXPECT_EQ(gpu_->SummarizeLogits(hidden.data(), {&cold, 1}, &out).code(), absl::StatusCode::kInvalidArgument);
  LogitRowRequest fine{.best = 3, .top_raw = 2};
  ASSERT_TRUE(gpu_->SummarizeLogits(hidden.data(), {&fine, 1}, &out).ok());
  EXPECT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].best.size(), 3u);
}

INSTANTIATE_TEST_SUITE_P(Vocab, CudaSamplingTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("Gemma262144") : std::string("Small300");
                         });

}  // namespace
}  // namespace layerpipe
