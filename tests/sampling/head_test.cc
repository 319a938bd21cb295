#include "engine/sampling/head.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace layerpipe {
namespace {

constexpr int64_t kHidden = 4;
constexpr int64_t kVocab = 300;

// A head whose logits are a fixed function of the hidden row, summarised on the host like the CPU
// backend does; it counts what it was asked for.
struct FakeHead {
  int summarized_rows = 0;
  int whole_rows = 0;
  bool on_device = false;

  static void Row(const float* h, float* out) {
    for (int64_t v = 0; v < kVocab; ++v) out[v] = std::sin(h[0] * (v + 1) + h[1]) * 3 + h[2] * (v % 7);
  }
  HeadOps Ops() {
    HeadOps ops;
    ops.summarizes_on_device = on_device;
    ops.summarize = [this](const float* rows, absl::Span<const LogitRowRequest> requests,
                           std::vector<LogitRowSummary>* out) {
      out->clear();
      std::vector<float> row(kVocab);
      for (size_t i = 0; i < requests.size(); ++i) {
        Row(rows + i * kHidden, row.data());
        out->push_back(SummarizeLogitRow(row, requests[i]));
        ++summarized_rows;
      }
      return absl::OkStatus();
    };
    ops.logits = [this](const float* rows, int64_t m, float* logits) {
      for (int64_t i = 0; i < m; ++i) Row(rows + i * kHidden, logits + i * kVocab);
      whole_rows += static_cast<int>(m);
      return absl::OkStatus();
    };
    return ops;
  }
};

std::vector<float> Hidden(float a) { return {a, 0.5f * a, 0.1f, 0.0f}; }

// The reference: the whole row, sampled directly.
SampledToken Reference(const SamplingParams& p, const std::vector<float>& hidden, int top) {
  std::vector<float> row(kVocab);
  FakeHead::Row(hidden.data(), row.data());
  Sampler s(p, kVocab);
  return SampleFromRow(s, row, {}, top);
}

TEST(HeadTest, GreedyGoesThroughASummaryAndPicksWhatTheWholeRowWould) {
  FakeHead head;
  SamplingParams greedy;
  std::vector<std::vector<float>> hidden = {Hidden(0.3f), Hidden(1.7f), Hidden(-0.4f)};
  std::vector<Sampler> samplers(3, Sampler(greedy, kVocab));
  std::vector<SampleRow> rows;
  for (int i = 0; i < 3; ++i) rows.push_back({&samplers[i], {}, hidden[i].data(), /*top_logprobs=*/2});
  std::vector<SampledToken> out;
  ASSERT_TRUE(SampleRows(head.Ops(), kHidden, kVocab, rows, /*rows_per_call=*/2, &out).ok());
  EXPECT_EQ(head.summarized_rows, 3);
  EXPECT_EQ(head.whole_rows, 0);
  for (int i = 0; i < 3; ++i) {
    const SampledToken want = Reference(greedy, hidden[i], 2);
    EXPECT_EQ(out[i].token, want.token) << i;
    EXPECT_NEAR(out[i].logprob, want.logprob, 1e-5) << i;
    ASSERT_EQ(out[i].top.size(), 2u);
    EXPECT_EQ(out[i].top[0].id, want.top[0].id);
  }
}

// One row through the head with a fresh sampler of `p`.
SampledToken SampleOne(FakeHead& head, const SamplingParams& p, const std::vector<float>& hidden) {
  Sampler sampler(p, kVocab);
  const SampleRow row{&sampler, {}, hidden.data()};
  std::vector<SampledToken> out;
  EXPECT_TRUE(SampleRows(head.Ops(), kHidden, kVocab, {&row, 1}, 8, &out).ok());
  return out.empty() ? SampledToken{} : out[0];
}

// Plain temperature: on the host only the whole row serves it; a device summary does, with the same draw.
class HeadTemperatureTest : public ::testing::TestWithParam<bool> {};

TEST_P(HeadTemperatureTest, DrawsWhatTheWholeRowWould) {
  FakeHead head;
  head.on_device = GetParam();
  SamplingParams hot;
  hot.temperature = 0.8f;
  hot.seed = 11;
  const std::vector<float> hidden = Hidden(0.9f);
  EXPECT_EQ(SampleOne(head, hot, hidden).token, Reference(hot, hidden, 0).token);
  EXPECT_EQ(head.summarized_rows, GetParam() ? 1 : 0);
  EXPECT_EQ(head.whole_rows, GetParam() ? 0 : 1);
}

INSTANTIATE_TEST_SUITE_P(HostAndDevice, HeadTemperatureTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "OnDevice" : "OnHost"; });

TEST(HeadTest, ANucleusWiderThanTheSummaryFallsBackToTheWholeRow) {
  FakeHead head;
  head.on_device = true;
  SamplingParams wide;
  wide.temperature = 50.0f;  // nearly flat: the nucleus holds most of the 300 ids...
  wide.top_p = 0.999f;
  wide.seed = 3;
  const std::vector<float> hidden = Hidden(0.2f);
  EXPECT_EQ(SampleOne(head, wide, hidden).token, Reference(wide, hidden, 0).token);
  // ...more than the summary's best entries carry: the summary is asked first, then the whole row.
  EXPECT_EQ(head.summarized_rows, 1);
  EXPECT_EQ(head.whole_rows, 1);
}

}  // namespace
}  // namespace layerpipe
