// The CUDA backend against the CPU executor on small generated checkpoints, in both precisions:
// prefill in chunks with a window shorter than the prompt, batched decode at different positions, a
// context that crosses cache pages and uses split-K decode, layer-range splits, decode graphs, KV
// byte accounting and input errors. Needs a CUDA device (label "gpu").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "engine/cuda/cuda_backend.h"
#include "engine/kv_cache.h"
#include "engine/layer_executor.h"
#include "tests/engine/test_util.h"

namespace layerpipe {
namespace {

// Both backends accumulate every matmul and reduction in fp32 (CPU: fixed SIMD order, GPU: cuBLASLt
// and warp order), so in fp32 mode they differ by rounding only: about 1e-6 relative per operation,
// a few 1e-5 on logits after five layers. In bf16 mode a different accumulation order can flip the
// rounding of an activation to bf16 (2^-8 relative), and each backend is within ~0.03 of the float64
// oracle, so they can be up to twice that apart.
double Tolerance(Precision p) { return p == Precision::kFp32 ? 2e-4 : 0.06; }

double MaxAbsDiff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

std::vector<int32_t> RandomIds(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids{2};
  while (static_cast<int>(ids.size()) < n) ids.push_back(3 + static_cast<int32_t>(rng() % (vocab - 3)));
  return ids;
}

// One backend's view of a run: embed, forward slices, logits.
struct Runner {
  LayerBackend* b;
  int64_t H, V;

  // Embeds ids, runs one step over the given (state, ids) slices and returns the logits of every row.
  std::vector<float> Step(const std::vector<std::pair<SequenceState*, std::vector<int32_t>>>& in) {
    std::vector<int32_t> all;
    std::vector<SequenceSlice> slices;
    for (const auto& [kv, ids] : in) {
      all.insert(all.end(), ids.begin(), ids.end());
      slices.push_back({kv, static_cast<int64_t>(ids.size())});
    }
    std::vector<float> h(all.size() * H);
    EXPECT_TRUE(b->Embed(all, h.data()).ok());
    absl::Status st = b->Forward(slices, h.data());
    EXPECT_TRUE(st.ok()) << st;
    std::vector<float> logits(all.size() * V);
    st = b->Logits(h.data(), static_cast<int64_t>(all.size()), logits.data());
    EXPECT_TRUE(st.ok()) << st;
    return logits;
  }
};

class CudaBackendTest : public ::testing::TestWithParam<Precision> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing_util::MakeCheckpoint("cuda", testing_util::SmallModel()));
  }
  static void TearDownTestSuite() { delete dir_; }

  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
    auto config = LoadModelConfig(*dir_);
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
    auto w = ModelWeights::Load(*dir_, config_, {0, config_.num_layers, true, true});
    ASSERT_TRUE(w.ok()) << w.status();
    weights_ = std::move(*w);
    cpu_ = std::make_unique<LayerRangeExecutor>(*weights_, GetParam(), pool_);
    auto gpu = MakeCudaBackend(*weights_, GetParam(), 0);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
  }

  Runner Cpu() { return {cpu_.get(), config_.hidden_size, config_.vocab_size}; }
  Runner Gpu() { return {gpu_.get(), config_.hidden_size, config_.vocab_size}; }

  static std::string* dir_;
  ModelConfig config_;
  ThreadPool pool_{2};
  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<LayerBackend> cpu_, gpu_;
};
std::string* CudaBackendTest::dir_ = nullptr;

TEST_P(CudaBackendTest, DeviceNameAndPrecision) {
  EXPECT_EQ(gpu_->device(), "cuda:0");
  EXPECT_EQ(gpu_->precision(), GetParam());
  EXPECT_EQ(gpu_->layer_begin(), 0);
  EXPECT_EQ(gpu_->layer_end(), config_.num_layers);
}

TEST_P(CudaBackendTest, EmbeddingEqualsCpu) {
  const auto ids = RandomIds(11, 300, 9);
  std::vector<float> a(ids.size() * config_.hidden_size), b(a.size());
  ASSERT_TRUE(cpu_->Embed(ids, a.data()).ok());
  ASSERT_TRUE(gpu_->Embed(ids, b.data()).ok());
  // A gather and one multiply: exact.
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

TEST_P(CudaBackendTest, ChunkedPrefillMatchesCpu) {
  // 23 tokens against a window of 6: every sliding layer's ring wraps within the prompt.
  const auto ids = RandomIds(23, 300, 1);
  auto cpu_kv = cpu_->NewSequence();
  const std::vector<float> want = Cpu().Step({{cpu_kv.get(), ids}});
  for (const std::vector<int>& chunks : std::vector<std::vector<int>>{{23}, {5, 7, 11}, {1, 1, 4, 17}}) {
    auto kv = gpu_->NewSequence();
    size_t at = 0;
    for (int c : chunks) {
      std::vector<int32_t> part(ids.begin() + at, ids.begin() + at + c);
      const std::vector<float> got = Gpu().Step({{kv.get(), part}});
      const double d = MaxAbsDiff(got.data(), want.data() + at * config_.vocab_size, got.size());
      EXPECT_LE(d, Tolerance(GetParam())) << "chunk at " << at << " of " << chunks.size() << " chunks";
      at += c;
    }
    EXPECT_EQ(kv->length(), 23);
  }
}

TEST_P(CudaBackendTest, BatchedDecodeAtDifferentPositionsMatchesCpu) {
  std::vector<std::vector<int32_t>> prompts = {RandomIds(9, 300, 3), RandomIds(14, 300, 4), RandomIds(3, 300, 5)};
  std::vector<std::unique_ptr<SequenceState>> ckv, gkv;
  std::vector<std::pair<SequenceState*, std::vector<int32_t>>> cin, gin;
  for (auto& p : prompts) {
    ckv.push_back(cpu_->NewSequence());
    gkv.push_back(gpu_->NewSequence());
    cin.push_back({ckv.back().get(), p});
    gin.push_back({gkv.back().get(), p});
  }
  EXPECT_LE(MaxAbsDiff(Cpu().Step(cin).data(), Gpu().Step(gin).data(), 26 * config_.vocab_size),
            Tolerance(GetParam()));
  std::mt19937 rng(11);
  for (int step = 0; step < 6; ++step) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      const int32_t t = 3 + static_cast<int32_t>(rng() % 290);
      cin[i].second = {t};
      gin[i].second = {t};
    }
    const auto want = Cpu().Step(cin);
    const auto got = Gpu().Step(gin);
    EXPECT_LE(MaxAbsDiff(got.data(), want.data(), want.size()), Tolerance(GetParam())) << "decode step " << step;
  }
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(gkv[i]->length(), ckv[i]->length());
}

TEST_P(CudaBackendTest, LongContextAcrossPagesAndSplitDecodeMatchesCpu) {
  // 600 positions span three pages of the full layer's cache; decode then splits its key range.
  const auto ids = RandomIds(600, 300, 21);
  auto ckv = cpu_->NewSequence();
  auto gkv = gpu_->NewSequence();
  for (size_t at = 0; at < ids.size(); at += 256) {
    std::vector<int32_t> part(ids.begin() + at, ids.begin() + std::min(ids.size(), at + 256));
    const auto want = Cpu().Step({{ckv.get(), part}});
    const auto got = Gpu().Step({{gkv.get(), part}});
    EXPECT_LE(MaxAbsDiff(got.data(), want.data(), want.size()), Tolerance(GetParam())) << "chunk at " << at;
  }
  for (int32_t t : {7, 8, 9}) {
    const auto want = Cpu().Step({{ckv.get(), {t}}});
    const auto got = Gpu().Step({{gkv.get(), {t}}});
    EXPECT_LE(MaxAbsDiff(got.data(), want.data(), want.size()), Tolerance(GetParam())) << "decode token " << t;
  }
}

TEST_P(CudaBackendTest, WideWindowSplitSlidingAttentionMatchesCpu) {
  // The main checkpoint's window (6) is shorter than one split piece, so its sliding layers never
  // split. A window of 200 gives a 1-token decode a sliding key range of 200 keys: two pieces on any
  // GPU (ChooseSplits), cut inside the window of a ring that has wrapped; the 300-token chunk also
  // runs split with rows whose windows start at different keys.
  RandomCheckpointOptions o = testing_util::SmallModel();
  o.window = 200;
  o.seed = 8;
  static const std::string* dir = new std::string(testing_util::MakeCheckpoint("cuda_wide", o));
  auto config = LoadModelConfig(*dir);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->sliding_window, 200);
  auto w = ModelWeights::Load(*dir, *config, {0, config->num_layers, true, true});
  ASSERT_TRUE(w.ok()) << w.status();
  LayerRangeExecutor cpu(**w, GetParam(), pool_);
  auto gpu = MakeCudaBackend(**w, GetParam(), 0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  Runner c{&cpu, config->hidden_size, config->vocab_size}, g{gpu->get(), config->hidden_size, config->vocab_size};
  auto ckv = cpu.NewSequence();
  auto gkv = (*gpu)->NewSequence();
  const auto ids = RandomIds(520, 300, 41);
  size_t at = 0;
  for (size_t n : {300, 220}) {
    std::vector<int32_t> part(ids.begin() + at, ids.begin() + at + n);
    const auto want = c.Step({{ckv.get(), part}});
    const auto got = g.Step({{gkv.get(), part}});
    EXPECT_LE(MaxAbsDiff(got.data(), want.data(), want.size()), Tolerance(GetParam())) << "chunk at " << at;
    at += n;
  }
  for (int32_t t : {17, 18, 19, 20}) {  // direct, then captured, then replayed decode steps
    const auto want = c.Step({{ckv.get(), {t}}});
    const auto got = g.Step({{gkv.get(), {t}}});
    EXPECT_LE(MaxAbsDiff(got.data(), want.data(), want.size()), Tolerance(GetParam())) << "decode token " << t;
  }
}

TEST_P(CudaBackendTest, KvBytesEqualCpu) {
  auto ckv = cpu_->NewSequence();
  auto gkv = gpu_->NewSequence();
  EXPECT_EQ(gkv->bytes(), 0u);
  int64_t len = 0;
  std::mt19937 rng(5);
  for (int64_t target : {1, 6, 7, 255, 256, 257, 520}) {
    std::vector<int32_t> part;
    while (len + static_cast<int64_t>(part.size()) < target) part.push_back(3 + static_cast<int32_t>(rng() % 290));
    Cpu().Step({{ckv.get(), part}});
    Gpu().Step({{gkv.get(), part}});
    len = target;
    EXPECT_EQ(gkv->length(), target);
    EXPECT_EQ(gkv->bytes(), ckv->bytes()) << "length " << target;
    EXPECT_EQ(gkv->sliding_bytes(), ckv->sliding_bytes()) << "length " << target;
  }
  EXPECT_GT(gkv->sliding_bytes(), 0u);
  EXPECT_GT(gkv->bytes(), gkv->sliding_bytes());
}

TEST_P(CudaBackendTest, LayerRangeStagesEqualTheWholeRange) {
  const auto ids = RandomIds(15, 300, 6);
  const int64_t H = config_.hidden_size, V = config_.vocab_size;
  std::vector<float> h_whole(ids.size() * H);
  ASSERT_TRUE(gpu_->Embed(ids, h_whole.data()).ok());
  auto kv = gpu_->NewSequence();
  SequenceSlice s{kv.get(), static_cast<int64_t>(ids.size())};
  ASSERT_TRUE(gpu_->Forward({&s, 1}, h_whole.data()).ok());
  std::vector<float> whole(ids.size() * V);
  ASSERT_TRUE(gpu_->Logits(h_whole.data(), ids.size(), whole.data()).ok());

  const std::vector<int> cuts = {0, 2, 3, config_.num_layers};  // a stage holding the full layer alone
  std::vector<float> h(ids.size() * H);
  for (size_t st = 0; st + 1 < cuts.size(); ++st) {
    const bool first = st == 0, last = st + 2 == cuts.size();
    auto w = ModelWeights::Load(*dir_, config_, {cuts[st], cuts[st + 1], first, last});
    ASSERT_TRUE(w.ok()) << w.status();
    auto stage = MakeCudaBackend(**w, GetParam(), 0);
    ASSERT_TRUE(stage.ok()) << stage.status();
    if (first) ASSERT_TRUE((*stage)->Embed(ids, h.data()).ok());
    auto skv = (*stage)->NewSequence();
    SequenceSlice slice{skv.get(), static_cast<int64_t>(ids.size())};
    ASSERT_TRUE((*stage)->Forward({&slice, 1}, h.data()).ok());
    if (last) {
      std::vector<float> logits(ids.size() * V);
      ASSERT_TRUE((*stage)->Logits(h.data(), ids.size(), logits.data()).ok());
      // The same kernels on the same shapes: identical bits.
      EXPECT_EQ(0, std::memcmp(whole.data(), logits.data(), whole.size() * sizeof(float)));
    }
  }
}

TEST_P(CudaBackendTest, DecodeGraphsEqualDirectLaunches) {
  setenv("LAYERPIPE_CUDA_GRAPHS", "0", 1);
  auto direct = MakeCudaBackend(*weights_, GetParam(), 0);
  unsetenv("LAYERPIPE_CUDA_GRAPHS");
  ASSERT_TRUE(direct.ok()) << direct.status();
  Runner a = Gpu(), b{direct->get(), config_.hidden_size, config_.vocab_size};
  std::vector<std::unique_ptr<SequenceState>> akv, bkv;
  std::vector<std::pair<SequenceState*, std::vector<int32_t>>> ain, bin;
  for (int i = 0; i < 2; ++i) {
    akv.push_back(gpu_->NewSequence());
    bkv.push_back((*direct)->NewSequence());
    const auto p = RandomIds(5 + 4 * i, 300, 30 + i);
    ain.push_back({akv.back().get(), p});
    bin.push_back({bkv.back().get(), p});
  }
  a.Step(ain);
  b.Step(bin);
  // Enough steps to replay the graph several times and wrap the rings (window 6).
  for (int step = 0; step < 8; ++step) {
    for (int i = 0; i < 2; ++i) ain[i].second = bin[i].second = {static_cast<int32_t>(10 + step + i)};
    const auto x = a.Step(ain);
    const auto y = b.Step(bin);
    EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float))) << "step " << step;
  }
  // A batch of one after a batch of two: a different graph (the first step of a batch size runs
  // directly as a warm-up, the second captures, the rest replay).
  ain.resize(1);
  bin.resize(1);
  for (int step = 0; step < 3; ++step) {
    ain[0].second = bin[0].second = {static_cast<int32_t>(77 + step)};
    const auto x = a.Step(ain);
    const auto y = b.Step(bin);
    EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float))) << "batch of one, step " << step;
  }
}

TEST_P(CudaBackendTest, BadInputsAreRejectedWithoutSideEffects) {
  const int64_t H = config_.hidden_size;
  std::vector<float> h(4 * H);
  std::vector<int32_t> bad = {2, 5, 300};
  absl::Status st = gpu_->Embed(bad, h.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("token id 300"), std::string::npos) << st;
  std::vector<int32_t> neg = {-1};
  EXPECT_FALSE(gpu_->Embed(neg, h.data()).ok());

  auto kv = gpu_->NewSequence();
  auto other = gpu_->NewSequence();
  SequenceSlice empty{kv.get(), 0};
  EXPECT_EQ(gpu_->Forward({&empty, 1}, h.data()).code(), absl::StatusCode::kInvalidArgument);
  SequenceSlice twice[2] = {{kv.get(), 1}, {kv.get(), 1}};
  EXPECT_EQ(gpu_->Forward(twice, h.data()).code(), absl::StatusCode::kInvalidArgument);
  auto cpu_state = cpu_->NewSequence();
  SequenceSlice foreign[2] = {{other.get(), 1}, {cpu_state.get(), 1}};
  EXPECT_EQ(gpu_->Forward(foreign, h.data()).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> big((config_.max_position_embeddings + 1) * H, 0.f);
  SequenceSlice too_long[2] = {{other.get(), 1}, {kv.get(), config_.max_position_embeddings + 1}};
  EXPECT_EQ(gpu_->Forward(too_long, big.data()).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(kv->length(), 0);
  EXPECT_EQ(other->length(), 0);
  EXPECT_EQ(kv->bytes(), 0u);

  // A middle stage holds neither the embedding nor the head.
  auto w = ModelWeights::Load(*dir_, config_, {1, 3, false, false});
  ASSERT_TRUE(w.ok()) << w.status();
  auto mid = MakeCudaBackend(**w, GetParam(), 0);
  ASSERT_TRUE(mid.ok()) << mid.status();
  std::vector<int32_t> ok_ids = {2};
  EXPECT_EQ((*mid)->Embed(ok_ids, h.data()).code(), absl::StatusCode::kFailedPrecondition);
  std::vector<float> logits(config_.vocab_size);
  EXPECT_EQ((*mid)->Logits(h.data(), 1, logits.data()).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(MakeCudaBackend(*weights_, GetParam(), CudaDeviceCount()).ok());
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaBackendTest, ::testing::Values(Precision::kFp32, Precision::kBf16),
                         [](const auto& info) { return info.param == Precision::kFp32 ? "fp32" : "bf16"; });

}  // namespace
}  // namespace layerpipe
