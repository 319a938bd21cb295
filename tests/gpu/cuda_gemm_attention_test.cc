// Prefill attention through GEMMs (bf16 mode: slices of at least kGemmAttentionMinRows rows) against
// the attention kernel (LAYERPIPE_CUDA_GEMM_ATTENTION=0) and the CPU: chunks that start empty, that read
// earlier positions from the pages and from a wrapped ring, several query blocks per slice (a tiny
// scratch budget), and a step mixing a long slice with decode rows of other sequences. Label "gpu".
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/step_plan.h"
#include "engine/cpu/cpu_backend.h"
#include "tests/engine/test_util.h"
#include "tests/gpu/cuda_test_util.h"

namespace layerpipe {
namespace {

// Makes a CUDA backend with the environment variable `name` set to `value` while it reads it.
std::unique_ptr<LayerBackend> BackendWithEnv(const ModelWeights& w, const char* name, const char* value) {
  setenv(name, value, 1);
  auto b = MakeCudaBackend(w, Precision::kBf16, 0);
  unsetenv(name);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(*b) : nullptr;
}

class CudaGemmAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
    static const std::string* dir = new std::string(testing_util::MakeCheckpoint("cuda_gemm", testing_util::SmallModel()));
    auto config = LoadModelConfig(*dir);
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
    auto w = ModelWeights::Load(*dir, config_, {0, config_.num_layers, true, true});
    ASSERT_TRUE(w.ok()) << w.status();
    weights_ = std::move(*w);
    cpu_ = std::make_unique<CpuBackend>(*weights_, Precision::kBf16, pool_);
    auto gemm = MakeCudaBackend(*weights_, Precision::kBf16, 0);
    ASSERT_TRUE(gemm.ok()) << gemm.status();
    gemm_ = std::move(*gemm);
    kernel_ = BackendWithEnv(*weights_, "LAYERPIPE_CUDA_GEMM_ATTENTION", "0");
    ASSERT_NE(kernel_, nullptr);
  }

  Runner Of(LayerBackend* b) { return {b, config_.hidden_size, config_.vocab_size}; }

  // Feeds `ids` to every backend in chunks of the given sizes, then decodes `decode` tokens, comparing
  // every row's logits of `gpu` with the CPU's and with the attention kernel's.
  void Compare(LayerBackend* gpu, const std::vector<int32_t>& ids, const std::vector<size_t>& chunks,
               const std::vector<int32_t>& decode) {
    auto ckv = cpu_->NewSequence(), gkv = gpu->NewSequence(), kkv = kernel_->NewSequence();
    size_t at = 0;
    auto step = [&](const std::vector<int32_t>& part, const std::string& what) {
      const auto want = Of(cpu_.get()).Step({{ckv.get(), part}});
      const auto got = Of(gpu).Step({{gkv.get(), part}});
      const auto kernel = Of(kernel_.get()).Step({{kkv.get(), part}});
      EXPECT_TRUE(Close(got.data(), want.data(), want.size(), Precision::kBf16)) << what << " vs the CPU";
      EXPECT_TRUE(Close(got.data(), kernel.data(), kernel.size(), Precision::kBf16)) << what << " vs the kernel";
    };
    for (size_t n : chunks) {
      step({ids.begin() + at, ids.begin() + at + n}, "chunk at " + std::to_string(at));
      at += n;
    }
    for (int32_t t : decode) step({t}, "decode token " + std::to_string(t));
  }

  ModelConfig config_;
  ThreadPool pool_{2};
  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<LayerBackend> cpu_, gemm_, kernel_;
};

TEST_F(CudaGemmAttentionTest, ChunksFromEmptyPagesAndAWrappedRingMatch) {
  // Window 6 and 256-token pages: the 64-row chunk (the smallest that takes the GEMM path) and the
  // last one read earlier keys from the wrapped ring and from two pages.
  ASSERT_EQ(cuda::kGemmAttentionMinRows, 64);
  Compare(gemm_.get(), RandomIds(700, 300, 3), {300, 64, 336}, {5, 6});
}

TEST_F(CudaGemmAttentionTest, SeveralQueryBlocksPerSliceMatch) {
  // A 1 MiB budget cuts each chunk into blocks of a few dozen rows.
  auto small = BackendWithEnv(*weights_, "LAYERPIPE_CUDA_GEMM_ATTENTION_BUDGET", "1048576");
  ASSERT_NE(small, nullptr);
  const cuda::SliceMeta whole{0, 400, 0};
  ASSERT_GT(cuda::PlanGemmQueryBlocks(whole, 0, config_.num_heads, 1 << 20).size(), 3u);
  Compare(small.get(), RandomIds(700, 300, 4), {400, 300}, {9});
}

TEST_F(CudaGemmAttentionTest, AStepMixingALongSliceWithDecodeRowsMatchesTheCpu) {
  // One long slice (GEMM) and two one-row slices (kernel tiles, split over their short ranges) in one
  // step; the split-K reduce also writes the long slice's rows, which the GEMM path must overwrite.
  auto a_cpu = cpu_->NewSequence(), b_cpu = cpu_->NewSequence(), c_cpu = cpu_->NewSequence();
  auto a_gpu = gemm_->NewSequence(), b_gpu = gemm_->NewSequence(), c_gpu = gemm_->NewSequence();
  const auto a = RandomIds(30, 300, 5), c = RandomIds(500, 300, 6), b = RandomIds(200, 300, 7);
  for (auto [kc, kg, ids] : {std::tuple{a_cpu.get(), a_gpu.get(), &a}, std::tuple{c_cpu.get(), c_gpu.get(), &c}}) {
    const auto want = Of(cpu_.get()).Step({{kc, *ids}});
    const auto got = Of(gemm_.get()).Step({{kg, *ids}});
    EXPECT_TRUE(Close(got.data(), want.data(), want.size(), Precision::kBf16));
  }
  const auto want = Of(cpu_.get()).Step({{a_cpu.get(), {11}}, {b_cpu.get(), b}, {c_cpu.get(), {12}}});
  const auto got = Of(gemm_.get()).Step({{a_gpu.get(), {11}}, {b_gpu.get(), b}, {c_gpu.get(), {12}}});
  EXPECT_TRUE(Close(got.data(), want.data(), want.size(), Precision::kBf16));
}

}  // namespace
}  // namespace layerpipe
