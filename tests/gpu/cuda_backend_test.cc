// The CUDA backend against the CPU executor on small generated checkpoints, in both precisions:
// prefill in chunks with a window shorter than the prompt, batched decode at different positions, a
// context that crosses cache pages and uses split-K decode, layer-range splits, decode graphs, KV
// byte accounting, input errors, and the device hand-off (steps that leave their rows in device memory,
// and the NCCL link between stages on two GPUs). Needs a CUDA device (label "gpu").
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "engine/cuda/cuda_backend.h"
#include "engine/cpu/kv_cache.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/kv_layout.h"
#include "tests/engine/test_util.h"
#include "tests/gpu/cuda_test_util.h"

namespace layerpipe {
namespace {

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
    cpu_ = std::make_unique<CpuBackend>(*weights_, GetParam(), pool_);
    auto gpu = MakeCudaBackend(*weights_, GetParam(), 0);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
  }

  Runner Cpu() { return {cpu_.get(), config_.hidden_size, config_.vocab_size}; }
  // Stage backends for layers [0, 2) on device0 and the rest on device1, joined by a link of `kind`
  // whose transport() is `transport`. Declared in this order so the links go before their backends.
  struct LinkedStages {
    std::unique_ptr<ModelWeights> w0, w1;
    std::unique_ptr<LayerBackend> first, second;
    std::unique_ptr<PeerLink> out, in;
  };
  void Link(int device0, int device1, PeerLinkKind kind, const std::string& transport, LinkedStages* st);

  // Stages `first` (layers [0, k)) and `second` (the rest) joined by out_link / in_link give, step by
  // step, the rows the whole range gives on gpu_, bit for bit.
  void LinkedStagesEqualTheWholeRange(LayerBackend& first, LayerBackend& second, PeerLink& out_link,
                                      PeerLink& in_link);

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
      EXPECT_TRUE(Close(got.data(), want.data() + at * config_.vocab_size, got.size(), GetParam()))
          << "chunk at " << at << " of " << chunks.size() << " chunks";
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
  EXPECT_TRUE(Close(Gpu().Step(gin).data(), Cpu().Step(cin).data(), 26 * config_.vocab_size, GetParam()));
  std::mt19937 rng(11);
  for (int step = 0; step < 6; ++step) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      const int32_t t = 3 + static_cast<int32_t>(rng() % 290);
      cin[i].second = {t};
      gin[i].second = {t};
    }
    const auto want = Cpu().Step(cin);
    const auto got = Gpu().Step(gin);
    EXPECT_TRUE(Close(got.data(), want.data(), want.size(), GetParam())) << "decode step " << step;
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
    EXPECT_TRUE(Close(got.data(), want.data(), want.size(), GetParam())) << "chunk at " << at;
  }
  for (int32_t t : {7, 8, 9}) {
    const auto want = Cpu().Step({{ckv.get(), {t}}});
    const auto got = Gpu().Step({{gkv.get(), {t}}});
    EXPECT_TRUE(Close(got.data(), want.data(), want.size(), GetParam())) << "decode token " << t;
  }
}

TEST_P(CudaBackendTest, WideWindowSplitSlidingAttentionMatchesCpu) {
  // The main checkpoint's window (6) is shorter than one split piece, so its sliding layers never
  // split. A window of 200 gives a 1-token decode a sliding key range of 200 keys: two pieces on any
  // GPU (ChooseSplits), cut inside the window of a ring that has wrapped; in fp32 the 300-token chunk
  // also runs split with rows whose windows start at different keys (in bf16 long chunks attend
  // through GEMMs: cuda_gemm_attention_test).
  RandomCheckpointOptions o = testing_util::SmallModel();
  o.window = 200;
  o.seed = 8;
  static const std::string* dir = new std::string(testing_util::MakeCheckpoint("cuda_wide", o));
  auto config = LoadModelConfig(*dir);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->sliding_window, 200);
  auto w = ModelWeights::Load(*dir, *config, {0, config->num_layers, true, true});
  ASSERT_TRUE(w.ok()) << w.status();
  CpuBackend cpu(**w, GetParam(), pool_);
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
    EXPECT_TRUE(Close(got.data(), want.data(), want.size(), GetParam())) << "chunk at " << at;
    at += n;
  }
  for (int32_t t : {17, 18, 19, 20}) {  // direct, then captured, then replayed decode steps
    const auto want = c.Step({{ckv.get(), {t}}});
    const auto got = g.Step({{gkv.get(), {t}}});
    EXPECT_TRUE(Close(got.data(), want.data(), want.size(), GetParam())) << "decode token " << t;
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

// The prefix cache on the device: a sequence started from a snapshot equals one that ran the prefix in
// the same chunks, bit for bit, at cuts inside a page, at a page boundary and past it (the window is far
// shorter), while the snapshot's own sequence and the other fork go on writing after the cut.
TEST_P(CudaBackendTest, PrefixSnapshotForksEqualSequencesThatRanThePrefix) {
  ASSERT_TRUE(gpu_->keeps_prefixes());
  for (int cut : {37, static_cast<int>(kv::kPageTokens), static_cast<int>(kv::kPageTokens) + 45}) {
    const auto prefix = RandomIds(cut, 300, static_cast<uint32_t>(cut));
    const auto a = RandomIds(19, 300, 1), b = RandomIds(23, 300, 2);
    auto origin = gpu_->NewSequence();
    Gpu().Step({{origin.get(), prefix}});
    std::unique_ptr<PrefixSnapshot> snap = origin->Snapshot();
    ASSERT_NE(snap, nullptr);
    EXPECT_EQ(snap->length(), cut);
    EXPECT_EQ(snap->bytes(), origin->bytes());
    auto fork_a = gpu_->NewSequenceFrom(*snap);
    auto fork_b = gpu_->NewSequenceFrom(*snap);
    ASSERT_TRUE(fork_a.ok() && fork_b.ok()) << fork_a.status();
    EXPECT_EQ((*fork_a)->length(), cut);
    const std::vector<float> origin_b = Gpu().Step({{origin.get(), b}});
    const std::vector<float> got_a = Gpu().Step({{fork_a->get(), a}});
    const std::vector<float> got_b = Gpu().Step({{fork_b->get(), b}});
    auto fresh = [&](const std::vector<int32_t>& suffix) {
      auto kv = gpu_->NewSequence();
      Gpu().Step({{kv.get(), prefix}});
      return Gpu().Step({{kv.get(), suffix}});
    };
    const std::vector<float> want_a = fresh(a), want_b = fresh(b);
    EXPECT_EQ(0, std::memcmp(got_a.data(), want_a.data(), want_a.size() * sizeof(float))) << "cut " << cut;
    EXPECT_EQ(0, std::memcmp(got_b.data(), want_b.data(), want_b.size() * sizeof(float))) << "cut " << cut;
    EXPECT_EQ(0, std::memcmp(origin_b.data(), want_b.data(), want_b.size() * sizeof(float))) << "cut " << cut;
    // And the CPU's bits in its tolerance, as every other step here.
    auto cpu_kv = cpu_->NewSequence();
    Cpu().Step({{cpu_kv.get(), prefix}});
    const std::vector<float> cpu_a = Cpu().Step({{cpu_kv.get(), a}});
    EXPECT_TRUE(Close(got_a.data(), cpu_a.data(), got_a.size(), GetParam())) << "cut " << cut;
  }
  // A CPU snapshot is not this backend's.
  auto cpu_kv = cpu_->NewSequence();
  Cpu().Step({{cpu_kv.get(), RandomIds(5, 300, 3)}});
  auto foreign = gpu_->NewSequenceFrom(*cpu_kv->Snapshot());
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kInvalidArgument);
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
    if (first) {
      ASSERT_TRUE((*stage)->Embed(ids, h.data()).ok());
    }
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

// ---- Device hand-off.

std::vector<float> ToHost(const DeviceRows& rows) {
  std::vector<float> h(rows.rows() * rows.width());
  const absl::Status st = rows.CopyToHost(h.data());
  EXPECT_TRUE(st.ok()) << st;
  return h;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Rows that did not come from the CUDA plugin.
class HostOnlyRows final : public DeviceRows {
 public:
  HostOnlyRows(int64_t rows, int64_t width) : rows_(rows), width_(width) {}
  int64_t rows() const override { return rows_; }
  int64_t width() const override { return width_; }
  absl::Status CopyToHost(float* out) const override {
    std::fill(out, out + rows_ * width_, 0.f);
    return absl::OkStatus();
  }

 private:
  int64_t rows_, width_;
};

// Slices of one step over `states`, with n[i] tokens each.
std::vector<SequenceSlice> Slices(const std::vector<std::unique_ptr<SequenceState>>& states,
                                  const std::vector<int64_t>& n) {
  std::vector<SequenceSlice> out;
  for (size_t i = 0; i < n.size(); ++i) out.push_back({states[i].get(), n[i]});
  return out;
}

// The token counts of a run's steps: a batched prefill of two prompts, a second chunk, then batch-2
// decode steps (the first runs directly, the second captures the graph, the rest replay it) and
// batch-1 decode steps (another graph).
std::vector<std::vector<int64_t>> HandoffSteps() {
  std::vector<std::vector<int64_t>> steps = {{9, 14}, {5, 3}};
  for (int i = 0; i < 5; ++i) steps.push_back({1, 1});
  for (int i = 0; i < 4; ++i) steps.push_back({1});
  return steps;
}

TEST_P(CudaBackendTest, DeviceUidAndHandoffAreReported) {
  EXPECT_TRUE(gpu_->device_handoff());
  const std::string uid = gpu_->device_uid();
  EXPECT_FALSE(uid.empty());
  EXPECT_NE(uid.find(':'), std::string::npos) << uid;  // a PCI bus id, domain:bus:device.function
  auto again = MakeCudaBackend(*weights_, GetParam(), 0);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->device_uid(), uid);
  EXPECT_FALSE(cpu_->device_handoff());
  EXPECT_EQ(cpu_->ForwardToDevice({}, nullptr, nullptr).status().code(), absl::StatusCode::kUnimplemented);
}

TEST_P(CudaBackendTest, ForwardToDeviceEqualsForwardBitForBit) {
  // Two stages [0, 2) and [2, L) run twice: with Forward through host memory, and with ForwardToDevice,
  // the first stage from host rows, the second alternately from the first's device rows and from a
  // host copy of them. Same kernels, same shapes, graphs included: the same bits everywhere.
  const int k = 2;
  auto w0 = ModelWeights::Load(*dir_, config_, {0, k, true, false});
  ASSERT_TRUE(w0.ok()) << w0.status();
  auto w1 = ModelWeights::Load(*dir_, config_, {k, config_.num_layers, false, true});
  ASSERT_TRUE(w1.ok()) << w1.status();
  std::vector<std::unique_ptr<LayerBackend>> host_stages, dev_stages;
  for (auto* list : {&host_stages, &dev_stages}) {
    for (const ModelWeights* w : {w0->get(), w1->get()}) {
      auto b = MakeCudaBackend(*w, GetParam(), 0);
      ASSERT_TRUE(b.ok()) << b.status();
      list->push_back(std::move(*b));
    }
  }
  std::vector<std::vector<std::unique_ptr<SequenceState>>> host_kv(2), dev_kv(2);
  for (int st = 0; st < 2; ++st) {
    for (int i = 0; i < 2; ++i) {
      host_kv[st].push_back(host_stages[st]->NewSequence());
      dev_kv[st].push_back(dev_stages[st]->NewSequence());
    }
  }
  const int64_t H = config_.hidden_size;
  std::mt19937 rng(17);
  int step_no = 0;
  for (const std::vector<int64_t>& n : HandoffSteps()) {
    SCOPED_TRACE(::testing::Message() << "step " << step_no);
    std::vector<int32_t> ids;
    for (int64_t c : n) {
      for (int64_t t = 0; t < c; ++t) ids.push_back(3 + static_cast<int32_t>(rng() % 290));
    }
    std::vector<float> h(ids.size() * H);
    ASSERT_TRUE(host_stages[0]->Embed(ids, h.data()).ok());
    const std::vector<float> embedded = h;

    std::vector<float> mid;
    for (int st = 0; st < 2; ++st) {
      auto slices = Slices(host_kv[st], n);
      ASSERT_TRUE(host_stages[st]->Forward(slices, h.data()).ok());
      if (st == 0) mid = h;
    }

    auto first = dev_stages[0]->ForwardToDevice(Slices(dev_kv[0], n), embedded.data(), nullptr);
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_EQ((*first)->rows(), static_cast<int64_t>(ids.size()));
    ASSERT_EQ((*first)->width(), H);
    const std::vector<float> first_host = ToHost(**first);
    EXPECT_TRUE(SameBits(first_host, mid));
    const bool from_device = step_no % 2 == 0;
    auto second = from_device ? dev_stages[1]->ForwardToDevice(Slices(dev_kv[1], n), nullptr, *std::move(first))
                              : dev_stages[1]->ForwardToDevice(Slices(dev_kv[1], n), first_host.data(), nullptr);
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_TRUE(SameBits(ToHost(**second), h)) << (from_device ? "device" : "host") << " input";
    ++step_no;
  }
  for (int st = 0; st < 2; ++st) {
    for (int i = 0; i < 2; ++i) EXPECT_EQ(dev_kv[st][i]->length(), host_kv[st][i]->length());
  }
}

TEST_P(CudaBackendTest, BadDeviceInputsAreRejectedWithoutSideEffects) {
  const int64_t H = config_.hidden_size;
  auto maker = gpu_->NewSequence();
  std::vector<float> h(3 * H);
  const std::vector<int32_t> ids = {2, 40, 41};
  ASSERT_TRUE(gpu_->Embed(ids, h.data()).ok());
  SequenceSlice three{maker.get(), 3};
  auto rows3 = gpu_->ForwardToDevice({&three, 1}, h.data(), nullptr);
  ASSERT_TRUE(rows3.ok()) << rows3.status();

  auto kv = gpu_->NewSequence();
  SequenceSlice two{kv.get(), 2};
  // Three rows for a step of two.
  EXPECT_EQ(gpu_->ForwardToDevice({&two, 1}, nullptr, *std::move(rows3)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Rows of another plugin or backend kind.
  EXPECT_EQ(gpu_->ForwardToDevice({&two, 1}, nullptr, std::make_unique<HostOnlyRows>(2, H)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Neither input, and both.
  EXPECT_EQ(gpu_->ForwardToDevice({&two, 1}, nullptr, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  auto rows2 = gpu_->ForwardToDevice({&two, 1}, h.data(), nullptr);  // kv now holds 2 positions
  ASSERT_TRUE(rows2.ok()) << rows2.status();
  const size_t bytes_after_two = kv->bytes();
  EXPECT_EQ(gpu_->ForwardToDevice({&two, 1}, h.data(), std::make_unique<HostOnlyRows>(2, H)).status().code(),
            absl::StatusCode::kInvalidArgument);

  // Rows of the right count but another width: the output of a model with a wider hidden size.
  RandomCheckpointOptions o = testing_util::SmallModel();
  o.hidden = 128;
  o.seed = 9;
  static const std::string* wide_dir = new std::string(testing_util::MakeCheckpoint("cuda_hidden128", o));
  auto wide_config = LoadModelConfig(*wide_dir);
  ASSERT_TRUE(wide_config.ok()) << wide_config.status();
  auto ww = ModelWeights::Load(*wide_dir, *wide_config, {0, 1, false, false});
  ASSERT_TRUE(ww.ok()) << ww.status();
  auto wide = MakeCudaBackend(**ww, GetParam(), 0);
  ASSERT_TRUE(wide.ok()) << wide.status();
  auto wide_kv = (*wide)->NewSequence();
  SequenceSlice wide_two{wide_kv.get(), 2};
  std::vector<float> wide_in(2 * o.hidden, 0.5f);
  auto wide_rows = (*wide)->ForwardToDevice({&wide_two, 1}, wide_in.data(), nullptr);
  ASSERT_TRUE(wide_rows.ok()) << wide_rows.status();
  EXPECT_EQ((*wide_rows)->width(), o.hidden);
  EXPECT_EQ(gpu_->ForwardToDevice({&two, 1}, nullptr, *std::move(wide_rows)).status().code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(kv->length(), 2);
  EXPECT_EQ(kv->bytes(), bytes_after_two);
  // The rejected calls left the sequence as it was: a good step still continues it.
  SequenceSlice one{kv.get(), 1};
  std::vector<float> h1(H);
  const std::vector<int32_t> next = {42};
  ASSERT_TRUE(gpu_->Embed(next, h1.data()).ok());
  auto fine = gpu_->ForwardToDevice({&one, 1}, h1.data(), nullptr);
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(kv->length(), 3);
}

TEST_P(CudaBackendTest, EmptyStepToDeviceGivesEmptyRows) {
  auto out = gpu_->ForwardToDevice({}, std::vector<float>(1).data(), nullptr);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)->rows(), 0);
  EXPECT_EQ((*out)->width(), config_.hidden_size);
  EXPECT_TRUE((*out)->CopyToHost(nullptr).ok());
}

TEST_P(CudaBackendTest, PeerLinkIdsAndBadJoins) {
  auto id = gpu_->NewPeerLinkId();
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_FALSE(id->empty());
  auto other = gpu_->NewPeerLinkId();
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(*id, *other);
  for (PeerLinkKind kind : {PeerLinkKind::kAcrossDevices, PeerLinkKind::kSameDevice}) {
    EXPECT_EQ(gpu_->JoinPeerLink(id->substr(1), 0, kind, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(gpu_->JoinPeerLink(*id, 2, kind, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(gpu_->JoinPeerLink(*id, -1, kind, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  }
  // A join whose peer never comes gives up when asked (the worker's stage was replaced), not never:
  // as either end of a same-device link, and as the receiver of one across devices.
  std::vector<std::pair<PeerLinkKind, int>> lonely_joins = {{PeerLinkKind::kSameDevice, 0},
                                                            {PeerLinkKind::kSameDevice, 1}};
#ifdef LAYERPIPE_HAVE_NCCL
  lonely_joins.push_back({PeerLinkKind::kAcrossDevices, 1});
#else
  const absl::Status st = gpu_->JoinPeerLink(*id, 0, PeerLinkKind::kAcrossDevices, nullptr).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(st.message()).find("without NCCL"), std::string::npos) << st;
#endif
  for (auto [kind, rank] : lonely_joins) {
    auto fresh = gpu_->NewPeerLinkId();
    ASSERT_TRUE(fresh.ok()) << fresh.status();
    std::atomic<bool> give_up{false};
    std::thread replace([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      give_up = true;
    });
    const auto start = std::chrono::steady_clock::now();
    const absl::Status lonely = gpu_->JoinPeerLink(*fresh, rank, kind, &give_up).status();
    replace.join();
    EXPECT_EQ(lonely.code(), absl::StatusCode::kCancelled) << lonely << " rank " << rank;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  }
}

void CudaBackendTest::Link(int device0, int device1, PeerLinkKind kind, const std::string& transport,
                           LinkedStages* st) {
  const int k = 2, L = config_.num_layers;
  auto w0 = ModelWeights::Load(*dir_, config_, {0, k, true, false});
  auto w1 = ModelWeights::Load(*dir_, config_, {k, L, false, true});
  ASSERT_TRUE(w0.ok() && w1.ok());
  st->w0 = *std::move(w0);
  st->w1 = *std::move(w1);
  auto s0 = MakeCudaBackend(*st->w0, GetParam(), device0);
  auto s1 = MakeCudaBackend(*st->w1, GetParam(), device1);
  ASSERT_TRUE(s0.ok()) << s0.status();
  ASSERT_TRUE(s1.ok()) << s1.status();
  st->first = *std::move(s0);
  st->second = *std::move(s1);
  auto id = st->first->NewPeerLinkId();
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<std::unique_ptr<PeerLink>> out_link = absl::UnknownError("not joined");
  absl::StatusOr<std::unique_ptr<PeerLink>> in_link = absl::UnknownError("not joined");
  {
    std::thread a([&] { out_link = st->first->JoinPeerLink(*id, 0, kind, nullptr); });
    std::thread b([&] { in_link = st->second->JoinPeerLink(*id, 1, kind, nullptr); });
    a.join();
    b.join();
  }
  ASSERT_TRUE(out_link.ok()) << out_link.status();
  ASSERT_TRUE(in_link.ok()) << in_link.status();
  st->out = *std::move(out_link);
  st->in = *std::move(in_link);
  EXPECT_EQ(st->out->transport(), transport);
  EXPECT_EQ(st->out->Receive(1, config_.hidden_size).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(st->in->Send(nullptr).code(), absl::StatusCode::kFailedPrecondition);
}

void CudaBackendTest::LinkedStagesEqualTheWholeRange(LayerBackend& first, LayerBackend& second,
                                                   PeerLink& out_link, PeerLink& in_link) {
  const int64_t H = config_.hidden_size;
  // The whole range on device 0, through host memory: the expected rows of every step.
  const std::vector<std::vector<int64_t>> steps = HandoffSteps();
  std::vector<std::vector<float>> embedded, want;
  {
    std::vector<std::unique_ptr<SequenceState>> kv;
    kv.push_back(gpu_->NewSequence());
    kv.push_back(gpu_->NewSequence());
    std::mt19937 rng(23);
    for (const std::vector<int64_t>& n : steps) {
      std::vector<int32_t> ids;
      for (int64_t c : n) {
        for (int64_t t = 0; t < c; ++t) ids.push_back(3 + static_cast<int32_t>(rng() % 290));
      }
      std::vector<float> h(ids.size() * H);
      ASSERT_TRUE(first.Embed(ids, h.data()).ok());
      embedded.push_back(h);
      ASSERT_TRUE(gpu_->Forward(Slices(kv, n), h.data()).ok());
      want.push_back(h);
    }
  }

  // Each stage on its own thread, as in two worker processes, in the workers' order: the receive for a
  // step is posted only once its Send has returned (a worker sends a step's rows before the frame that
  // makes the next worker post the receive), so a Send that waited for its peer would hang here.
  std::mutex order_mu;
  std::condition_variable order_cv;
  size_t sends_returned = 0;
  std::vector<std::vector<float>> got(steps.size());
  absl::Status sent_ok, received_ok;
  std::thread sender([&] {
    std::vector<std::unique_ptr<SequenceState>> kv;
    kv.push_back(first.NewSequence());
    kv.push_back(first.NewSequence());
    for (size_t i = 0; i < steps.size() && sent_ok.ok(); ++i) {
      auto rows = first.ForwardToDevice(Slices(kv, steps[i]), embedded[i].data(), nullptr);
      sent_ok = rows.status();
      if (sent_ok.ok()) sent_ok = out_link.Send(std::shared_ptr<const DeviceRows>(*std::move(rows)));
      std::lock_guard<std::mutex> lock(order_mu);
      sends_returned = sent_ok.ok() ? i + 1 : steps.size();
      order_cv.notify_all();
    }
  });
  std::thread receiver([&] {
    std::vector<std::unique_ptr<SequenceState>> kv;
    kv.push_back(second.NewSequence());
    kv.push_back(second.NewSequence());
    for (size_t i = 0; i < steps.size() && received_ok.ok(); ++i) {
      {
        std::unique_lock<std::mutex> lock(order_mu);
        order_cv.wait(lock, [&] { return sends_returned > i; });
      }
      if (!sent_ok.ok()) break;
      const int64_t rows = static_cast<int64_t>(embedded[i].size()) / H;
      auto in = in_link.Receive(rows, H);
      received_ok = in.status();
      if (!received_ok.ok()) break;
      auto out = second.ForwardToDevice(Slices(kv, steps[i]), nullptr, *std::move(in));
      received_ok = out.status();
      if (received_ok.ok()) got[i] = ToHost(**out);
    }
  });
  sender.join();
  receiver.join();
  ASSERT_TRUE(sent_ok.ok()) << sent_ok;
  ASSERT_TRUE(received_ok.ok()) << received_ok;
  for (size_t i = 0; i < steps.size(); ++i) EXPECT_TRUE(SameBits(got[i], want[i])) << "step " << i;
}

TEST_P(CudaBackendTest, PeerLinkBetweenTwoGpusEqualsTheWholeRange) {
#ifndef LAYERPIPE_HAVE_NCCL
  GTEST_SKIP() << "the CUDA plugin was built without NCCL";
#else
  if (CudaDeviceCount() < 2) {
    GTEST_SKIP() << "needs two CUDA devices (NCCL will not put both ends of a link on one GPU); "
                 << CudaDeviceCount() << " visible";
  }
  int sm0 = 0, sm1 = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sm0, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sm1, cudaDevAttrMultiProcessorCount, 1), cudaSuccess);
  if (sm0 != sm1) {
    GTEST_SKIP() << "devices 0 and 1 differ (" << sm0 << " and " << sm1
                 << " SMs), so their attention splits and bits may differ";
  }
  const int64_t H = config_.hidden_size;
  LinkedStages st;
  ASSERT_NO_FATAL_FAILURE(Link(0, 1, PeerLinkKind::kAcrossDevices, "nccl", &st));
  EXPECT_NE(st.first->device_uid(), st.second->device_uid());
  LinkedStagesEqualTheWholeRange(*st.first, *st.second, *st.out, *st.in);

  // A receive still pending when its link goes: the rows say they never arrived, and a step fed with
  // them fails without advancing its sequence.
  auto orphan = st.in->Receive(1, H);
  ASSERT_TRUE(orphan.ok()) << orphan.status();
  st.in.reset();
  std::vector<float> lost(H);
  EXPECT_EQ((*orphan)->CopyToHost(lost.data()).code(), absl::StatusCode::kUnavailable);
  auto kv = st.second->NewSequence();
  SequenceSlice one{kv.get(), 1};
  EXPECT_EQ(st.second->ForwardToDevice({&one, 1}, nullptr, *std::move(orphan)).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(kv->length(), 0);
#endif
}

TEST_P(CudaBackendTest, SameDeviceLinkEqualsTheWholeRange) {
  // Two stages on one GPU in one process: the CUDA IPC link's own-process path (a link across
  // processes opens the same slots and events through IPC handles: tests/gpu/run.sh's two workers).
  const int64_t H = config_.hidden_size;
  LinkedStages st;
  ASSERT_NO_FATAL_FAILURE(Link(0, 0, PeerLinkKind::kSameDevice, "cuda-ipc", &st));
  EXPECT_EQ(st.first->device_uid(), st.second->device_uid());
  LinkedStagesEqualTheWholeRange(*st.first, *st.second, *st.out, *st.in);

  // A receive waiting for rows that never come lets go when the link is aborted (a new assignment).
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    st.in->Abort();
  });
  const absl::Status waited = st.in->Receive(1, H).status();
  aborter.join();
  EXPECT_FALSE(waited.ok());
  EXPECT_EQ(st.in->Receive(1, H).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(st.out->Send(nullptr).code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaBackendTest, ::testing::Values(Precision::kFp32, Precision::kBf16),
                         [](const auto& info) { return info.param == Precision::kFp32 ? "fp32" : "bf16"; });

}  // namespace
}  // namespace layerpipe
