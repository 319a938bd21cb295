// The worker's building blocks on their own: sizes, the hidden wire format, frame checks, step
// ordering, KV budgeting and log-probabilities.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "engine/model/config.h"
#include "engine/model/bf16.h"
#include "engine/cpu/thread_pool.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/weights.h"
#include "tests/engine/test_util.h"
#include "worker/byte_size.h"
#include "worker/frame_check.h"
#include "transport/hidden_codec.h"
#include "engine/model/kv_bytes.h"
#include "engine/sampling/logprobs.h"
#include "worker/step_sequencer.h"
#include "common/host_name.h"

namespace layerpipe {
namespace {

TEST(ByteSize, ParsesPlainAndSuffixedSizes) {
  EXPECT_EQ(*ParseByteSize("1048576"), 1048576);
  EXPECT_EQ(*ParseByteSize("512M"), int64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("8G"), int64_t{8} << 30);
  EXPECT_EQ(*ParseByteSize("8g"), int64_t{8} << 30);
  EXPECT_EQ(*ParseByteSize("8GiB"), int64_t{8} << 30);
  EXPECT_EQ(*ParseByteSize("8GB"), int64_t{8} << 30);
  EXPECT_EQ(*ParseByteSize("64K"), 65536);
  EXPECT_EQ(*ParseByteSize("2T"), int64_t{2} << 40);
  EXPECT_EQ(*ParseByteSize("100B"), 100);
}

TEST(ByteSize, RejectsMalformedZeroAndOverflowingSizes) {
  for (const char* bad : {"", "G", "-1G", "0", "0M", "1.5G", "8X", "8GG", "8 G B", "9999999999999999999999",
                          "16777216T"}) {
    auto r = ParseByteSize(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ByteSize, DefaultBudgetIsHalfOfMemory) {
  const int64_t budget = DefaultKvBudgetBytes();
  EXPECT_GT(budget, int64_t{64} << 20);
  EXPECT_EQ(budget, static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) / 2);
}

TEST(HiddenCodec, Fp32RoundTripsExactly) {
  std::vector<float> h = {1.0f, -2.5f, 3.14159f, 1e-30f, -0.0f, 65504.0f};
  std::string wire;
  EncodeHidden(h.data(), 2, 3, internal::v1::HIDDEN_F32, &wire);
  EXPECT_EQ(wire.size(), 24u);
  auto back = DecodeHidden(internal::v1::HIDDEN_F32, wire, 2, 3);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(std::memcmp(back->data(), h.data(), 24), 0);
}

TEST(HiddenCodec, Bf16RoundsToNearestEven) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 4.0f);
  std::vector<float> h(2 * 37);
  for (float& v : h) v = dist(rng);
  std::string wire;
  EncodeHidden(h.data(), 2, 37, internal::v1::HIDDEN_BF16, &wire);
  EXPECT_EQ(wire.size(), h.size() * 2);
  auto back = DecodeHidden(internal::v1::HIDDEN_BF16, wire, 2, 37);
  ASSERT_TRUE(back.ok()) << back.status();
  for (size_t i = 0; i < h.size(); ++i) EXPECT_EQ((*back)[i], RoundToBf16(h[i])) << i;
}

TEST(HiddenCodec, RejectsWrongSizesAndUnknownDtypes) {
  std::string wire(4 * 6, '\0');
  auto r = DecodeHidden(internal::v1::HIDDEN_F32, wire, 2, 4);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("24 bytes"), absl::string_view::npos) << r.status();
  EXPECT_FALSE(DecodeHidden(internal::v1::HIDDEN_BF16, wire, 2, 3).ok());  // 12 bytes expected
  EXPECT_TRUE(DecodeHidden(internal::v1::HIDDEN_BF16, wire, 4, 3).ok());
  EXPECT_FALSE(DecodeHidden(static_cast<internal::v1::HiddenDType>(7), wire, 2, 3).ok());
  EXPECT_TRUE(DecodeHidden(internal::v1::HIDDEN_F32, "", 0, 3).ok());
}

internal::v1::StepFrame OneSlice(std::vector<int32_t> ids, int64_t pos0 = 0) {
  internal::v1::StepFrame f;
  f.set_epoch(1);
  f.set_step_id(1);
  internal::v1::StepSlice* s = f.add_slices();
  s->set_seq_id(5);
  s->set_pos0(pos0);
  for (int32_t id : ids) s->add_ids(id);
  return f;
}

TEST(FrameCheck, AcceptsAGoodFrameAndCountsRows) {
  const StageShape shape{96, 300, 4096, true};
  internal::v1::StepFrame f = OneSlice({1, 2, 3});
  internal::v1::StepSlice* s = f.add_slices();
  s->set_seq_id(6);
  s->set_pos0(10);
  s->add_ids(299);
  s->set_sample(true);
  s->mutable_sampling()->set_temperature(0.7f);
  s->set_top_logprobs(20);
  int64_t rows = 0;
  ASSERT_TRUE(CheckFrameContent(f, shape, &rows).ok());
  EXPECT_EQ(rows, 4);
}

TEST(FrameCheck, RefusesEachBadField) {
  const StageShape shape{96, 300, 4096, true};
  int64_t rows;
  auto code = [&](const internal::v1::StepFrame& f) { return CheckFrameContent(f, shape, &rows).code(); };
  EXPECT_EQ(code(OneSlice({1, 300})), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(OneSlice({-1})), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(OneSlice({})), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(OneSlice({1}, -2)), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(OneSlice({1, 2}, 4095)), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(code(OneSlice({1}, std::numeric_limits<int64_t>::max())), absl::StatusCode::kOutOfRange);
  {
    internal::v1::StepFrame f = OneSlice({1});
    *f.add_slices() = f.slices(0);
    EXPECT_EQ(code(f), absl::StatusCode::kInvalidArgument);  // a sequence twice
  }
  {
    internal::v1::StepFrame f = OneSlice({1});
    f.mutable_slices(0)->mutable_sampling()->set_top_p(1.5f);
    const absl::Status st = CheckFrameContent(f, shape, &rows);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("top_p"), absl::string_view::npos) << st;
  }
  {
    internal::v1::StepFrame f = OneSlice({1});
    f.mutable_slices(0)->set_top_logprobs(21);
    EXPECT_EQ(code(f), absl::StatusCode::kInvalidArgument);
  }
  {
    internal::v1::StepFrame f = OneSlice({1});
    f.mutable_slices(0)->set_rng_skip(-1);
    EXPECT_EQ(code(f), absl::StatusCode::kInvalidArgument);
    f.mutable_slices(0)->set_rng_skip(int64_t{1} << 40);  // would spin the RNG for hours
    EXPECT_EQ(code(f), absl::StatusCode::kInvalidArgument);
  }
  {
    internal::v1::StepFrame f = OneSlice({1});
    f.mutable_slices(0)->set_score(true);
    f.mutable_slices(0)->set_next_id(300);
    EXPECT_EQ(code(f), absl::StatusCode::kInvalidArgument);
    f.mutable_slices(0)->set_next_id(-1);
    EXPECT_EQ(code(f), absl::StatusCode::kOk);
  }
  {
    internal::v1::StepFrame f = OneSlice({1});
    f.set_hidden(std::string(96 * 4, '\0'));  // the first stage embeds; it takes no hidden
    EXPECT_EQ(code(f), absl::StatusCode::kInvalidArgument);
  }
  {
    const StageShape big_vocab{96, 262144, 4096, true};
    internal::v1::StepFrame f = OneSlice(std::vector<int32_t>(257, 7));
    f.mutable_slices(0)->set_return_logits(true);
    const absl::Status st = CheckFrameContent(f, big_vocab, &rows);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("return_logits"), absl::string_view::npos) << st;
    f = OneSlice(std::vector<int32_t>(256, 7));
    f.mutable_slices(0)->set_return_logits(true);
    EXPECT_TRUE(CheckFrameContent(f, big_vocab, &rows).ok());
  }
  {
    const StageShape long_context{96, 300, 1 << 20, true};
    internal::v1::StepFrame f = OneSlice(std::vector<int32_t>(kMaxRowsPerFrame + 1, 7));
    EXPECT_EQ(CheckFrameContent(f, long_context, &rows).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(StepSequencer, ReleasesStepsInOrderWhateverTheArrivalOrder) {
  StepSequencer seq;
  EXPECT_EQ(seq.Check(0).code(), absl::StatusCode::kInvalidArgument);
  for (uint64_t id : {3, 1, 4}) {
    ASSERT_TRUE(seq.Check(id).ok()) << id;
    QueuedStep s;
    s.frame.set_step_id(id);
    seq.Add(id, std::move(s));
  }
  EXPECT_EQ(seq.Check(3).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(seq.Ready());
  EXPECT_EQ(seq.Pop().frame.step_id(), 1u);
  EXPECT_FALSE(seq.Ready());  // 2 has not arrived; 3 and 4 wait
  EXPECT_EQ(seq.Check(1).code(), absl::StatusCode::kAlreadyExists);
  QueuedStep two;
  two.frame.set_step_id(2);
  seq.Add(2, std::move(two));
  for (uint64_t want : {2, 3, 4}) {
    ASSERT_TRUE(seq.Ready());
    EXPECT_EQ(seq.Pop().frame.step_id(), want);
  }
  EXPECT_FALSE(seq.Ready());
  EXPECT_EQ(seq.Check(5 + StepSequencer::kMaxAhead).code(), absl::StatusCode::kInvalidArgument);
  seq.Reset();
  EXPECT_EQ(seq.next_step_id(), 1u);
  EXPECT_TRUE(seq.Check(1).ok());
}

TEST(KvBytes, PredictsWhatTheCachesAllocate) {
  const std::string dir = testing_util::MakeCheckpoint("kvbytes", testing_util::SmallModel());
  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  ThreadPool pool(1);
  for (Precision p : {Precision::kBf16, Precision::kFp32}) {
    for (auto [begin, end] : {std::pair{0, 2}, std::pair{2, 3}, std::pair{1, 5}}) {
      auto w = ModelWeights::Load(dir, *config, WeightSelection{begin, end, begin == 0, false});
      ASSERT_TRUE(w.ok()) << w.status();
      CpuBackend ex(**w, p, pool);
      auto kv = ex.NewSequence();
      EXPECT_EQ(KvBytesAtLength(*config, begin, end, p, 0), 0);
      int64_t length = 0;
      for (int64_t n : {1, 5, 250, 1, 300}) {
        std::vector<float> hidden(n * config->hidden_size, 0.01f);
        SequenceSlice slice{kv.get(), n};
        ASSERT_TRUE(ex.Forward({&slice, 1}, hidden.data()).ok());
        length += n;
        EXPECT_EQ(static_cast<int64_t>(kv->bytes()), KvBytesAtLength(*config, begin, end, p, length))
            << "layers [" << begin << "," << end << ") length " << length;
      }
    }
  }
}

TEST(Logprobs, LogSumExpAndTopMatchADirectComputation) {
  const std::vector<float> row = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f, -std::numeric_limits<float>::infinity(),
                                  std::numeric_limits<float>::quiet_NaN()};
  double sum = 0;
  for (float v : {1.0f, 3.0f, -2.0f, 3.0f, 0.5f}) sum += std::exp(double(v));
  const double lse = LogSumExp(row);
  EXPECT_NEAR(lse, std::log(sum), 1e-12);
  const auto top = TopLogprobs(row, 3, lse);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].id, 1);  // tie with id 3: the lower id first
  EXPECT_EQ(top[1].id, 3);
  EXPECT_EQ(top[2].id, 0);
  EXPECT_NEAR(top[0].logprob, 3.0 - std::log(sum), 1e-6);
  EXPECT_NEAR(top[2].logprob, 1.0 - std::log(sum), 1e-6);
  EXPECT_TRUE(TopLogprobs(row, 0, lse).empty());
  EXPECT_EQ(TopLogprobs(row, 50, lse).size(), row.size());
}

TEST(Logprobs, TopKOverALargeRowEqualsAFullSort) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> dist(-50, 50);  // many ties
  std::vector<float> row(5000);
  for (float& v : row) v = dist(rng) * 0.25f;
  std::vector<int32_t> order(row.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  const auto top = TopLogprobs(row, 20, 0.0);
  ASSERT_EQ(top.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(top[i].id, order[i]) << i;
    EXPECT_EQ(top[i].logprob, row[order[i]]);
  }
}

TEST(HostOf, KeepsTheHostPart) {
  EXPECT_EQ(HostOf("127.0.0.1:0"), "127.0.0.1");
  EXPECT_EQ(HostOf("[::1]:7000"), "[::1]");
  EXPECT_EQ(HostOf("localhost:1"), "localhost");
  EXPECT_EQ(HostOf("[::1]"), "[::1]");
}

}  // namespace
}  // namespace layerpipe
