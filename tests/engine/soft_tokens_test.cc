// Soft tokens in the engine: where a chunk may end, how runs of placeholder ids pair with attachments,
// and the forward pass with images and audio — chunk-independent, image blocks bidirectional on
// sliding layers only, audio causal.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "engine/engine.h"
#include "engine/model/soft_tokens.h"
#include "tests/engine/multimodal_test_util.h"
#include "tests/engine/test_util.h"

namespace layerpipe {
namespace {

using testing_util::kAudioId;
using testing_util::kImageId;

SoftSpan Image(int64_t offset, int64_t count) {
  SoftSpan s;
  s.kind = SoftSpan::Kind::kImage;
  s.offset = offset;
  s.count = count;
  return s;
}

SoftSpan Audio(int64_t offset, int64_t count, const float* samples = nullptr) {
  SoftSpan s;
  s.kind = SoftSpan::Kind::kAudio;
  s.offset = offset;
  s.count = count;
  s.samples = samples;
  return s;
}

TEST(ChunkEnd, NeverCutsAnImage) {
  const std::vector<SoftSpan> spans = {Image(5, 10), Audio(20, 8)};
  EXPECT_EQ(ChunkEnd(spans, 0, 30, 4), 4);    // before the image
  EXPECT_EQ(ChunkEnd(spans, 0, 30, 8), 5);    // would cut the image: ends just before it
  EXPECT_EQ(ChunkEnd(spans, 5, 30, 4), 15);   // starts at the image, shorter than it: grows over it
  EXPECT_EQ(ChunkEnd(spans, 5, 30, 12), 17);  // holds it whole
  EXPECT_EQ(ChunkEnd(spans, 15, 30, 7), 22);  // audio may be cut
  EXPECT_EQ(ChunkEnd(spans, 28, 30, 7), 30);  // the end of the prompt
}

TEST(SpansIn, ImagesWholeAudioTrimmed) {
  std::vector<float> samples(8 * 640);
  const std::vector<SoftSpan> spans = {Image(5, 10), Audio(20, 8, samples.data())};
  const std::vector<SoftSpan> in = SpansIn(spans, 15, 23, 640);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_EQ(in[0].kind, SoftSpan::Kind::kAudio);
  EXPECT_EQ(in[0].offset, 5);
  EXPECT_EQ(in[0].count, 3);
  EXPECT_EQ(in[0].samples, samples.data());
  const std::vector<SoftSpan> later = SpansIn(spans, 23, 30, 640);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].offset, 0);
  EXPECT_EQ(later[0].count, 5);
  EXPECT_EQ(later[0].samples, samples.data() + 3 * 640);
  const std::vector<PositionRange> blocks = ImageBlocks(SpansIn(spans, 0, 15, 640), 100);
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].begin, 105);
  EXPECT_EQ(blocks[0].end, 115);
}

TEST(FindSoftRuns, PairsRunsWithAttachmentsInOrder) {
  const std::vector<int32_t> ids = {2, 255999, kImageId, kImageId, 258882, 7, kAudioId, kAudioId, kAudioId, kImageId, 9};
  auto runs = FindSoftRuns(ids, kImageId, kAudioId, {2, 1}, {3});
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ(runs->size(), 3u);
  EXPECT_EQ((*runs)[0].kind, SoftSpan::Kind::kImage);
  EXPECT_EQ((*runs)[0].index, 0);
  EXPECT_EQ((*runs)[0].offset, 2);
  EXPECT_EQ((*runs)[1].kind, SoftSpan::Kind::kAudio);
  EXPECT_EQ((*runs)[1].count, 3);
  EXPECT_EQ((*runs)[2].index, 1);
  EXPECT_EQ((*runs)[2].offset, 9);
}

TEST(FindSoftRuns, MismatchesAreNamed) {
  const std::vector<int32_t> ids = {2, kImageId, kImageId, kImageId, 5};
  auto wrong_length = FindSoftRuns(ids, kImageId, kAudioId, {4}, {});
  ASSERT_FALSE(wrong_length.ok());
  EXPECT_EQ(wrong_length.status().message(),
            "the run of 3 ids 258880 at index 1 is for image 1, which makes 4 soft tokens");
  auto too_few = FindSoftRuns(ids, kImageId, kAudioId, {}, {});
  ASSERT_FALSE(too_few.ok());
  EXPECT_NE(too_few.status().message().find("more runs of id 258880 than the 0 images given"), std::string::npos)
      << too_few.status();
  auto left_over = FindSoftRuns(ids, kImageId, kAudioId, {3}, {2});
  ASSERT_FALSE(left_over.ok());
  EXPECT_NE(left_over.status().message().find("room for 1 of 1 images and 0 of 1 audio clips"), std::string::npos)
      << left_over.status();
}

using testing_util::MakeMultimodalPrompt;
using testing_util::MultimodalModel;
using testing_util::MultimodalPrompt;

std::unique_ptr<Engine> Load(const std::string& dir, Precision precision, int64_t chunk) {
  EngineOptions o;
  o.precision = precision;
  o.prefill_chunk = chunk;
  auto e = Engine::Load(dir, o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

class SoftTokenForwardTest : public ::testing::TestWithParam<Precision> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing_util::MakeCheckpoint("softtok", MultimodalModel("ssfs")));
    causal_dir_ = new std::string(testing_util::MakeCheckpoint("softtok_full", MultimodalModel("ff")));
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete causal_dir_;
  }
  static std::string* dir_;
  static std::string* causal_dir_;
};
std::string* SoftTokenForwardTest::dir_ = nullptr;
std::string* SoftTokenForwardTest::causal_dir_ = nullptr;

TEST_P(SoftTokenForwardTest, AnyChunkSizeGivesIdenticalLogits) {
  const MultimodalPrompt p = MakeMultimodalPrompt(1);
  auto whole = Load(*dir_, GetParam(), 512)->Score(p.ids, p.spans);
  ASSERT_TRUE(whole.ok()) << whole.status();
  for (int64_t chunk : {1, 2, 5, 7}) {
    auto chunked = Load(*dir_, GetParam(), chunk)->Score(p.ids, p.spans);
    ASSERT_TRUE(chunked.ok()) << chunked.status();
    EXPECT_EQ(std::memcmp(whole->data(), chunked->data(), whole->size() * sizeof(float)), 0) << "chunk " << chunk;
  }
}

TEST_P(SoftTokenForwardTest, SoftTokensReplaceThePlaceholderEmbeddings) {
  const MultimodalPrompt p = MakeMultimodalPrompt(2);
  auto engine = Load(*dir_, GetParam(), 512);
  auto with = engine->Score(p.ids, p.spans);
  auto without = engine->Score(p.ids);
  ASSERT_TRUE(with.ok() && without.ok());
  const int64_t V = engine->config().vocab_size;
  // Before the image nothing differs; at its first soft token everything after does.
  EXPECT_EQ(std::memcmp(with->data(), without->data(), p.image_begin * V * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(with->data() + p.image_begin * V, without->data() + p.image_begin * V, V * sizeof(float)), 0);
}

// Changing the image's last block reaches the logits of its first soft token only through the
// image block's bidirectional mask, which only sliding layers have.
TEST_P(SoftTokenForwardTest, ImageBlocksSeeLaterBlocksOnSlidingLayersOnly) {
  MultimodalPrompt p = MakeMultimodalPrompt(3);
  const MultimodalPrompt q = testing_util::WithLastBlockChanged(MakeMultimodalPrompt(3));
  const int64_t first = p.image_begin;
  for (const std::string* dir : {dir_, causal_dir_}) {
    auto engine = Load(*dir, GetParam(), 512);
    const int64_t V = engine->config().vocab_size;
    auto a = engine->Score(p.ids, p.spans);
    auto b = engine->Score(q.ids, q.spans);
    ASSERT_TRUE(a.ok() && b.ok());
    const bool same = std::memcmp(a->data() + first * V, b->data() + first * V, V * sizeof(float)) == 0;
    EXPECT_EQ(same, dir == causal_dir_) << (dir == dir_ ? "sliding layers must let block 0 see block 5"
                                                        : "full layers are causal");
    // The rows before the image never see it.
    EXPECT_EQ(std::memcmp(a->data(), b->data(), first * V * sizeof(float)), 0);
  }
}

TEST_P(SoftTokenForwardTest, AudioIsCausal) {
  MultimodalPrompt p = MakeMultimodalPrompt(4);
  MultimodalPrompt q = MakeMultimodalPrompt(4);
  for (int i = 3 * 640; i < 4 * 640; ++i) q.samples[i] = -q.samples[i];
  auto engine = Load(*dir_, GetParam(), 512);
  const int64_t V = engine->config().vocab_size, last_frame = p.spans[1].offset + 3;
  auto a = engine->Score(p.ids, p.spans);
  auto b = engine->Score(q.ids, q.spans);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(std::memcmp(a->data(), b->data(), last_frame * V * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(a->data() + last_frame * V, b->data() + last_frame * V, V * sizeof(float)), 0);
}

// An image prompt batched with a text prompt (and a decode step of a third sequence) gives each the logits
// it gets alone.
TEST_P(SoftTokenForwardTest, ImagesBatchWithTextOnlySequences) {
  const MultimodalPrompt p = MakeMultimodalPrompt(6);
  const std::vector<int32_t> text = {2, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79};
  for (int64_t chunk : {512, 4}) {
    auto engine = Load(*dir_, GetParam(), chunk);
    auto alone_image = engine->Score(p.ids, p.spans);
    auto alone_text = engine->Score(text);
    ASSERT_TRUE(alone_image.ok() && alone_text.ok());
    const int64_t V = engine->config().vocab_size;
    auto a = engine->NewSequence(), b = engine->NewSequence(), d = engine->NewSequence();
    ASSERT_TRUE(engine->Step({StepInput{d.get(), text}}).ok());
    const int32_t next = 90;
    const StepInput inputs[] = {{a.get(), p.ids, p.spans}, {b.get(), text}, {d.get(), {&next, 1}}};
    auto batched = engine->Step(inputs);
    ASSERT_TRUE(batched.ok()) << batched.status();
    EXPECT_EQ(std::memcmp((*batched)[0].data(), alone_image->data() + (p.ids.size() - 1) * V, V * sizeof(float)), 0)
        << "chunk " << chunk;
    EXPECT_EQ(std::memcmp((*batched)[1].data(), alone_text->data() + (text.size() - 1) * V, V * sizeof(float)), 0)
        << "chunk " << chunk;
  }
}

TEST_P(SoftTokenForwardTest, BadSpansAreRefused) {
  MultimodalPrompt p = MakeMultimodalPrompt(5);
  auto engine = Load(*dir_, GetParam(), 512);
  std::vector<SoftSpan> spans = p.spans;
  spans[0].count = 5;  // an image of 6 blocks
  ++spans[0].offset;
  auto st = engine->Score(p.ids, spans);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().message(), "an image of 144x96 pixels does not make the span's 5 soft tokens");
  spans = p.spans;
  spans[1].offset -= 1;  // starts on the boa id
  st = engine->Score(p.ids, spans);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("not the placeholder 258881"), std::string::npos) << st.status();
}

INSTANTIATE_TEST_SUITE_P(Precisions, SoftTokenForwardTest, ::testing::Values(Precision::kFp32, Precision::kBf16),
                         [](const auto& info) { return std::string(PrecisionName(info.param)); });

}  // namespace
}  // namespace layerpipe
