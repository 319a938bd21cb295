// The worker's building blocks on their own: sizes, frame checks, step ordering, host names.
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

TEST(ByteSize, SizeOrShareTakesAShareOrBytesOrZero) {
  auto half = ParseSizeOrShare("50%");
  ASSERT_TRUE(half.ok());
  EXPECT_DOUBLE_EQ(half->share, 0.5);
  auto bytes = ParseSizeOrShare("2G");
  ASSERT_TRUE(bytes.ok());
  EXPECT_LT(bytes->share, 0);
  EXPECT_EQ(bytes->bytes, int64_t{2} << 30);
  auto off = ParseSizeOrShare("0");
  ASSERT_TRUE(off.ok());
  EXPECT_LT(off->share, 0);
  EXPECT_EQ(off->bytes, 0);
  for (const char* bad : {"101%", "-1%", "x%", "%", "1.5G", ""}) {
    EXPECT_EQ(ParseSizeOrShare(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
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

// Image blocks and soft inputs: a 96x48 image (2 blocks of 48) and 2 audio frames among the ids.
internal::v1::StepFrame SoftTokenFrame() {
  internal::v1::StepFrame f = OneSlice({2, 255999, 258880, 258880, 258882, 258881, 258881, 7}, /*pos0=*/10);
  internal::v1::StepSlice* s = f.mutable_slices(0);
  internal::v1::PositionSpan* b = s->add_image_blocks();
  b->set_begin(12);
  b->set_end(14);
  internal::v1::SoftInput* image = s->add_soft_inputs();
  image->set_offset(2);
  image->set_count(2);
  image->mutable_image()->set_height(48);
  image->mutable_image()->set_width(96);
  image->mutable_image()->set_rgb(std::string(48 * 96 * 3, '\x7f'));
  internal::v1::SoftInput* audio = s->add_soft_inputs();
  audio->set_offset(5);
  audio->set_count(2);
  audio->set_audio_samples(std::string(2 * 640 * 4, '\0'));
  return f;
}

TEST(FrameCheck, SoftTokensAreCheckedAgainstTheirPlaceholders) {
  StageShape shape{96, 262144, 4096, true};
  shape.vision_block = 48;
  shape.audio_frame = 640;
  shape.image_id = 258880;
  shape.audio_id = 258881;
  int64_t rows;
  ASSERT_TRUE(CheckFrameContent(SoftTokenFrame(), shape, &rows).ok()) << CheckFrameContent(SoftTokenFrame(), shape, &rows);
  auto message = [&](const internal::v1::StepFrame& f) {
    const absl::Status st = CheckFrameContent(f, shape, &rows);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    return std::string(st.message());
  };
  internal::v1::StepFrame f = SoftTokenFrame();
  f.mutable_slices(0)->mutable_image_blocks(0)->set_end(15);  // over the eoi id
  EXPECT_NE(message(f).find("holds id 258882 at position 14"), std::string::npos);
  f = SoftTokenFrame();
  f.mutable_slices(0)->mutable_image_blocks(0)->set_begin(8);  // before the slice
  EXPECT_NE(message(f).find("is not ascending inside the slice's positions [10, 18)"), std::string::npos);
  f = SoftTokenFrame();
  f.mutable_slices(0)->mutable_soft_inputs(0)->mutable_image()->set_width(144);
  EXPECT_NE(message(f).find("does not make the soft input's 2 blocks"), std::string::npos);
  f = SoftTokenFrame();
  f.mutable_slices(0)->mutable_soft_inputs(0)->mutable_image()->mutable_rgb()->pop_back();
  EXPECT_NE(message(f).find("RGB bytes"), std::string::npos);
  f = SoftTokenFrame();
  f.mutable_slices(0)->mutable_soft_inputs(1)->set_offset(4);  // starts on the boa id
  EXPECT_NE(message(f).find("not the placeholder 258881"), std::string::npos);
  f = SoftTokenFrame();
  f.mutable_slices(0)->mutable_soft_inputs(1)->mutable_audio_samples()->append("x");
  EXPECT_NE(message(f).find("bytes of samples"), std::string::npos);
  f = SoftTokenFrame();
  f.mutable_slices(0)->mutable_soft_inputs(1)->set_count(100);
  EXPECT_NE(message(f).find("lie outside the slice's 8 rows"), std::string::npos);
  f = SoftTokenFrame();
  f.mutable_slices(0)->clear_soft_inputs();  // a block with no image on the first stage
  EXPECT_NE(message(f).find("1 image blocks but 0 images to embed"), std::string::npos);
  // Later stages see the blocks only; soft inputs are the first stage's.
  StageShape later = shape;
  later.first = false;
  EXPECT_TRUE(CheckFrameContent(f, later, &rows).ok());
  EXPECT_NE(CheckFrameContent(SoftTokenFrame(), later, &rows).message().find("first stage only"), std::string::npos);
  // A model without images or audio takes neither.
  StageShape text_only{96, 262144, 4096, true};
  EXPECT_NE(CheckFrameContent(SoftTokenFrame(), text_only, &rows).message().find("takes no images"), std::string::npos);
}

TEST(FrameCheck, APrefixIsNeverAtPositionZero) {
  const StageShape shape{96, 300, 4096, true};
  internal::v1::StepFrame f = OneSlice({1, 2});
  f.mutable_slices(0)->set_prefix_from(9);
  int64_t rows;
  const absl::Status st = CheckFrameContent(f, shape, &rows);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("starts after it"), absl::string_view::npos) << st;
  f.mutable_slices(0)->set_pos0(40);
  EXPECT_TRUE(CheckFrameContent(f, shape, &rows).ok());
}

TEST(FrameCheck, PositionsNearInt64MaxAreReportedWithoutOverflow) {
  // pos0 + ids_size - 1 overflowed int64 while formatting this error (UBSan; the input is
  // tests/fuzz/crashes/step_frame_fuzz/pos0_int64_max_overflows).
  const StageShape shape{96, 300, 4096, true};
  int64_t rows = -1;
  absl::Status st = CheckFrameContent(OneSlice({1, 2}, std::numeric_limits<int64_t>::max()), shape, &rows);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("positions 9223372036854775807..9223372036854775808 pass the model's limit of 4096"),
            absl::string_view::npos)
      << st;
  st = CheckFrameContent(OneSlice(std::vector<int32_t>(3, 1), std::numeric_limits<int64_t>::max() - 1), shape, &rows);
  EXPECT_NE(st.message().find("positions 9223372036854775806..9223372036854775808"), absl::string_view::npos) << st;
  EXPECT_EQ(rows, -1);
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

TEST(HostOf, KeepsTheHostPart) {
  EXPECT_EQ(HostOf("127.0.0.1:0"), "127.0.0.1");
  EXPECT_EQ(HostOf("[::1]:7000"), "[::1]");
  EXPECT_EQ(HostOf("localhost:1"), "localhost");
  EXPECT_EQ(HostOf("[::1]"), "[::1]");
}

}  // namespace
}  // namespace layerpipe
