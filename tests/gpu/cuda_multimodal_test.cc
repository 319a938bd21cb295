// Soft tokens on the CUDA backend against the CPU: the image and audio embedders' rows, Score of a
// prompt with an image and an audio clip through the engine, chunk-size independence, and the image
// blocks' mask (bidirectional on sliding layers only) in the attention kernel, in the prefill GEMMs and
// across several query blocks, with earlier context in a wrapped ring. Needs a CUDA device (label "gpu");
// built against the emulator as cuda_multimodal_test_emu.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/engine.h"
#include "tests/engine/multimodal_test_util.h"
#include "tests/engine/test_util.h"
#include "tests/gpu/cuda_test_util.h"

namespace layerpipe {
namespace {

using testing_util::MakeMultimodalPrompt;
using testing_util::MultimodalPrompt;

std::unique_ptr<Engine> LoadEngine(const std::string& dir, Precision precision, int64_t chunk, bool cuda) {
  EngineOptions o;
  o.precision = precision;
  o.prefill_chunk = chunk;
  o.threads = 2;
  if (cuda) {
    o.make_backend = [](const ModelWeights& w, Precision p, ThreadPool&) { return MakeCudaBackend(w, p, 0); };
  }
  auto e = Engine::Load(dir, o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// Largest |got − want| relative to the largest |want|.
double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(double(got[i]) - double(want[i])));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  return diff / scale;
}

class CudaMultimodalTest : public ::testing::TestWithParam<Precision> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing_util::MakeCheckpoint("cuda_mm", testing_util::MultimodalModel("ssfs")));
    causal_dir_ = new std::string(testing_util::MakeCheckpoint("cuda_mm_full", testing_util::MultimodalModel("ff")));
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete causal_dir_;
  }
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  }
  static std::string* dir_;
  static std::string* causal_dir_;
};
std::string* CudaMultimodalTest::dir_ = nullptr;
std::string* CudaMultimodalTest::causal_dir_ = nullptr;

TEST_P(CudaMultimodalTest, EmbeddersEqualCpu) {
  const MultimodalPrompt p = MakeMultimodalPrompt(1);
  auto cpu = LoadEngine(*dir_, GetParam(), 512, false);
  auto gpu = LoadEngine(*dir_, GetParam(), 512, true);
  ASSERT_TRUE(cpu && gpu);
  const int64_t H = cpu->config().hidden_size;
  std::vector<float> want(6 * H), got(6 * H);
  ASSERT_TRUE(cpu->executor().EmbedImage(p.spans[0].image, want.data()).ok());
  absl::Status st = gpu->executor().EmbedImage(p.spans[0].image, got.data());
  ASSERT_TRUE(st.ok()) << st;
  // fp32: the same values up to the GEMMs' summation order (6,912 terms, then 32): ~2e-7 of the row
  // scale. bf16: LayerNorm outputs a rounding apart can round to neighbouring bf16 values before a
  // GEMM (2e-4 on the emulator); a bound far below what a wrong step (a missed norm or bias) costs.
  const double bound = GetParam() == Precision::kFp32 ? 1e-5 : 5e-3;
  EXPECT_LE(RelativeError(got, want), bound) << "image";
  std::vector<float> audio_want(4 * H), audio_got(4 * H);
  ASSERT_TRUE(cpu->executor().EmbedAudio(p.samples.data(), 4, audio_want.data()).ok());
  st = gpu->executor().EmbedAudio(p.samples.data(), 4, audio_got.data());
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_LE(RelativeError(audio_got, audio_want), bound) << "audio";
  // The CPU's refusals, word for word.
  ImageView bad = p.spans[0].image;
  bad.width = 100;
  const absl::Status cpu_bad = cpu->executor().EmbedImage(bad, want.data());
  const absl::Status gpu_bad = gpu->executor().EmbedImage(bad, got.data());
  EXPECT_EQ(gpu_bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_bad.message(), cpu_bad.message());
  EXPECT_EQ(gpu->executor().EmbedAudio(nullptr, 4, got.data()).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(CudaMultimodalTest, StagesWithoutTheEmbeddersRefuseSoftTokens) {
  const MultimodalPrompt p = MakeMultimodalPrompt(1);
  auto config = LoadModelConfig(*dir_);
  ASSERT_TRUE(config.ok()) << config.status();
  // A later stage: its layers only.
  auto w = ModelWeights::Load(*dir_, *config, {2, config->num_layers, false, true});
  ASSERT_TRUE(w.ok()) << w.status();
  auto gpu = MakeCudaBackend(**w, GetParam(), 0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::vector<float> out(6 * config->hidden_size);
  EXPECT_EQ((*gpu)->EmbedImage(p.spans[0].image, out.data()).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*gpu)->EmbedAudio(p.samples.data(), 4, out.data()).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(CudaMultimodalTest, ScoreWithAnImageAndAudioMatchesCpu) {
  const MultimodalPrompt p = MakeMultimodalPrompt(2);
  for (const std::string* dir : {dir_, causal_dir_}) {
    auto want = LoadEngine(*dir, GetParam(), 512, false)->Score(p.ids, p.spans);
    auto got = LoadEngine(*dir, GetParam(), 512, true)->Score(p.ids, p.spans);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(Close(got->data(), want->data(), want->size(), GetParam())) << *dir;
  }
}

TEST_P(CudaMultimodalTest, AnyChunkSizeGivesTheSameLogits) {
  const MultimodalPrompt p = MakeMultimodalPrompt(3);
  auto whole = LoadEngine(*dir_, GetParam(), 512, true)->Score(p.ids, p.spans);
  ASSERT_TRUE(whole.ok()) << whole.status();
  for (int64_t chunk : {1, 2, 5, 7}) {
    auto chunked = LoadEngine(*dir_, GetParam(), chunk, true)->Score(p.ids, p.spans);
    ASSERT_TRUE(chunked.ok()) << chunked.status();
#ifdef LAYERPIPE_CUDA_EMULATOR
    // The kernels see every query's keys in the same tiles and lanes whatever rows share its block,
    // and the emulated GEMMs sum in one order for any row count: identical bits.
    EXPECT_EQ(std::memcmp(whole->data(), chunked->data(), whole->size() * sizeof(float)), 0) << "chunk " << chunk;
#else
    // cuBLASLt may pick another algorithm for another row count.
    EXPECT_TRUE(Close(chunked->data(), whole->data(), whole->size(), GetParam())) << "chunk " << chunk;
#endif
  }
}

// Changing the image's last block reaches the logits of its first soft token only through the image
// block's bidirectional mask, which only sliding layers have.
TEST_P(CudaMultimodalTest, ImageBlocksSeeLaterBlocksOnSlidingLayersOnly) {
  const MultimodalPrompt p = MakeMultimodalPrompt(4);
  const MultimodalPrompt q = testing_util::WithLastBlockChanged(MakeMultimodalPrompt(4));
  const int64_t first = p.image_begin;
  for (const std::string* dir : {dir_, causal_dir_}) {
    auto engine = LoadEngine(*dir, GetParam(), 512, true);
    const int64_t V = engine->config().vocab_size;
    auto a = engine->Score(p.ids, p.spans);
    auto b = engine->Score(q.ids, q.spans);
    ASSERT_TRUE(a.ok() && b.ok());
    const bool same = std::memcmp(a->data() + first * V, b->data() + first * V, V * sizeof(float)) == 0;
    EXPECT_EQ(same, dir == causal_dir_) << (dir == dir_ ? "sliding layers must let block 0 see block 5"
                                                        : "full layers are causal");
    EXPECT_EQ(std::memcmp(a->data(), b->data(), first * V * sizeof(float)), 0) << "rows before the image";
  }
}

// ---- Image blocks straight through Forward on the text checkpoint (window 6): blocks longer than the
// window and than a tile, a one-position block, a second slice in the same step, earlier context in a
// wrapped ring, then decode.

struct MaskedSlice {
  SequenceState* kv;
  std::vector<int32_t> ids;
  std::vector<PositionRange> blocks;
};

std::vector<float> StepWithBlocks(LayerBackend& b, const std::vector<MaskedSlice>& in, int64_t H, int64_t V) {
  std::vector<int32_t> all;
  std::vector<SequenceSlice> slices;
  for (const MaskedSlice& s : in) {
    all.insert(all.end(), s.ids.begin(), s.ids.end());
    slices.push_back({s.kv, static_cast<int64_t>(s.ids.size()), s.blocks});
  }
  std::vector<float> h(all.size() * H), logits(all.size() * V);
  EXPECT_TRUE(b.Embed(all, h.data()).ok());
  absl::Status st = b.Forward(slices, h.data());
  EXPECT_TRUE(st.ok()) << st;
  st = b.Logits(h.data(), static_cast<int64_t>(all.size()), logits.data());
  EXPECT_TRUE(st.ok()) << st;
  return logits;
}

class CudaImageBlockMaskTest : public ::testing::TestWithParam<Precision> {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
    static const std::string* dir =
        new std::string(testing_util::MakeCheckpoint("cuda_masks", testing_util::SmallModel()));
    auto config = LoadModelConfig(*dir);
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
    auto w = ModelWeights::Load(*dir, config_, {0, config_.num_layers, true, true});
    ASSERT_TRUE(w.ok()) << w.status();
    weights_ = std::move(*w);
    cpu_ = std::make_unique<CpuBackend>(*weights_, GetParam(), pool_);
  }

  std::unique_ptr<LayerBackend> Cuda(const char* env = nullptr, const char* value = nullptr) {
    if (env != nullptr) setenv(env, value, 1);
    auto b = MakeCudaBackend(*weights_, GetParam(), 0);
    if (env != nullptr) unsetenv(env);
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? std::move(*b) : nullptr;
  }

  // The steps below on `gpu` and on the CPU, every row's logits held to the CPU's; returns the GPU's.
  std::vector<std::vector<float>> CompareWithCpu(LayerBackend& gpu, bool with_blocks, const std::string& what) {
    const int64_t H = config_.hidden_size, V = config_.vocab_size;
    auto ca = cpu_->NewSequence(), cb = cpu_->NewSequence();
    auto ga = gpu.NewSequence(), gb = gpu.NewSequence();
    const auto ids = RandomIds(200, 300, 17);
    auto blocks = [&](std::vector<PositionRange> b) { return with_blocks ? b : std::vector<PositionRange>{}; };
    struct Step {
      std::vector<int32_t> a, b;
      std::vector<PositionRange> a_blocks, b_blocks;
    };
    const std::vector<Step> steps = {
        {{ids.begin(), ids.begin() + 30}, {}, {}, {}},
        // 120 rows at 30: blocks of 40 and 30 positions (longer than the window and a tile) and one of 1;
        // beside it a fresh 9-row sequence with a block at its end.
        {{ids.begin() + 30, ids.begin() + 150}, {ids.begin() + 150, ids.begin() + 159},
         blocks({{40, 80}, {90, 91}, {100, 130}}), blocks({{5, 9}})},
        {{ids[160]}, {ids[161]}, {}, {}},
        {{ids[162]}, {ids[163]}, {}, {}},
    };
    std::vector<std::vector<float>> out;
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step& s = steps[i];
      std::vector<MaskedSlice> c{{ca.get(), s.a, s.a_blocks}}, g{{ga.get(), s.a, s.a_blocks}};
      if (!s.b.empty()) {
        c.push_back({cb.get(), s.b, s.b_blocks});
        g.push_back({gb.get(), s.b, s.b_blocks});
      }
      const auto want = StepWithBlocks(*cpu_, c, H, V);
      out.push_back(StepWithBlocks(gpu, g, H, V));
      EXPECT_TRUE(Close(out.back().data(), want.data(), want.size(), GetParam())) << what << ", step " << i;
    }
    return out;
  }

  ModelConfig config_;
  ThreadPool pool_{2};
  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<LayerBackend> cpu_;
};

TEST_P(CudaImageBlockMaskTest, AttentionKernelMatchesCpu) {
  auto gpu = Cuda("LAYERPIPE_CUDA_GEMM_ATTENTION", "0");
  ASSERT_NE(gpu, nullptr);
  const auto masked = CompareWithCpu(*gpu, true, "kernel");
  const auto causal = CompareWithCpu(*gpu, false, "kernel, no blocks");
  const int64_t V = config_.vocab_size;
  // The blocks change the second step: its first row (position 30) does not see them, block 0's first
  // row (position 40) does.
  EXPECT_EQ(std::memcmp(masked[1].data(), causal[1].data(), V * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(masked[1].data() + 10 * V, causal[1].data() + 10 * V, V * sizeof(float)), 0);
}

TEST_P(CudaImageBlockMaskTest, PrefillGemmsMatchCpu) {
  if (GetParam() == Precision::kFp32) GTEST_SKIP() << "prefill attends through GEMMs in the bf16 mode only";
  // Slices of 64 rows or more attend through GEMMs; a 16 KiB budget also cuts the 120-row slice into
  // query blocks of 16 rows, some of them ending inside an image block.
  auto gpu = Cuda();
  ASSERT_NE(gpu, nullptr);
  CompareWithCpu(*gpu, true, "gemm");
  auto small = Cuda("LAYERPIPE_CUDA_GEMM_ATTENTION_BUDGET", "16384");
  ASSERT_NE(small, nullptr);
  CompareWithCpu(*small, true, "gemm, small blocks");
}

TEST_P(CudaImageBlockMaskTest, ChunkingChangesNoBit) {
  // 60 positions with an image block over [10, 50) in one step, and in chunks of 10, 40 (the block),
  // 1, 1 and 8 rows. The block's rows see up to 47 keys, more than a tile holds, and the tiles of a
  // block of rows start at the same multiples of the tile size however the rows were chunked: each
  // row's logits come out the same (on the emulator bit for bit; on a GPU cuBLASLt may pick other
  // algorithms for other row counts).
  auto gpu = Cuda("LAYERPIPE_CUDA_GEMM_ATTENTION", "0");
  ASSERT_NE(gpu, nullptr);
  const int64_t H = config_.hidden_size, V = config_.vocab_size;
  const auto ids = RandomIds(60, 300, 23);
  auto whole_kv = gpu->NewSequence(), kv = gpu->NewSequence();
  const auto whole = StepWithBlocks(*gpu, {{whole_kv.get(), ids, {{10, 50}}}}, H, V);
  int64_t at = 0;
  for (int64_t n : {10, 40, 1, 1, 8}) {
    std::vector<PositionRange> blocks;
    if (at == 10) blocks.push_back({10, 50});
    const auto got = StepWithBlocks(*gpu, {{kv.get(), {ids.begin() + at, ids.begin() + at + n}, blocks}}, H, V);
#ifdef LAYERPIPE_CUDA_EMULATOR
    EXPECT_EQ(std::memcmp(got.data(), whole.data() + at * V, got.size() * sizeof(float)), 0) << "chunk at " << at;
#else
    EXPECT_TRUE(Close(got.data(), whole.data() + at * V, got.size(), GetParam())) << "chunk at " << at;
#endif
    at += n;
  }
}

TEST_P(CudaImageBlockMaskTest, BadBlocksAreRejectedWithoutSideEffects) {
  auto gpu = Cuda();
  ASSERT_NE(gpu, nullptr);
  auto kv = gpu->NewSequence();
  const auto ids = RandomIds(8, 300, 3);
  std::vector<float> h(ids.size() * config_.hidden_size);
  ASSERT_TRUE(gpu->Embed(ids, h.data()).ok());
  for (const std::vector<PositionRange>& bad : std::vector<std::vector<PositionRange>>{
           {{6, 9}}, {{3, 3}}, {{4, 6}, {2, 3}}}) {
    const SequenceSlice s{kv.get(), 8, bad};
    const absl::Status st = gpu->Forward({&s, 1}, h.data());
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_EQ(kv->length(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaMultimodalTest, ::testing::Values(Precision::kFp32, Precision::kBf16),
                         [](const auto& info) { return std::string(PrecisionName(info.param)); });
INSTANTIATE_TEST_SUITE_P(Precisions, CudaImageBlockMaskTest, ::testing::Values(Precision::kFp32, Precision::kBf16),
                         [](const auto& info) { return std::string(PrecisionName(info.param)); });

}  // namespace
}  // namespace layerpipe
