// The forward pass gives bit-identical results whatever the chunking, batching or layer split — the
// property pipelining, continuous batching and replay after a fault rely on.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "engine/engine.h"
#include "engine/cpu/cpu_backend.h"
#include "tests/engine/test_util.h"

namespace layerpipe {
namespace {

std::vector<int32_t> RandomIds(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids{2};
  while (static_cast<int>(ids.size()) < n) ids.push_back(3 + static_cast<int32_t>(rng() % (vocab - 3)));
  return ids;
}

bool BitEqual(const std::vector<float>& a, const float* b) {
  return std::memcmp(a.data(), b, a.size() * sizeof(float)) == 0;
}

class ForwardConsistencyTest : public ::testing::TestWithParam<Precision> {
 protected:
  static void SetUpTestSuite() { dir_ = new std::string(testing_util::MakeCheckpoint("fwd", testing_util::SmallModel())); }
  static void TearDownTestSuite() { delete dir_; }

  std::unique_ptr<Engine> Load(int64_t chunk) {
    EngineOptions o;
    o.precision = GetParam();
    o.prefill_chunk = chunk;
    auto e = Engine::Load(*dir_, o);
    EXPECT_TRUE(e.ok()) << e.status();
    return std::move(*e);
  }
  static std::string* dir_;
};
std::string* ForwardConsistencyTest::dir_ = nullptr;

TEST_P(ForwardConsistencyTest, ChunkSizesGiveIdenticalLogits) {
  const auto ids = RandomIds(23, 300, 1);
  auto whole = Load(1000)->Score(ids);
  ASSERT_TRUE(whole.ok()) << whole.status();
  for (int64_t chunk : {1, 2, 5, 7, 16}) {
    auto chunked = Load(chunk)->Score(ids);
    ASSERT_TRUE(chunked.ok()) << chunked.status();
    EXPECT_TRUE(BitEqual(*whole, chunked->data())) << "chunk size " << chunk;
  }
}

TEST_P(ForwardConsistencyTest, PrefillEqualsTokenByTokenDecode) {
  auto engine = Load(512);
  const auto ids = RandomIds(20, 300, 2);
  auto all = engine->Score(ids);
  ASSERT_TRUE(all.ok());
  auto kv = engine->NewSequence();
  const int64_t V = engine->config().vocab_size;
  for (size_t i = 0; i < ids.size(); ++i) {
    StepInput in{kv.get(), absl::MakeConstSpan(&ids[i], 1)};
    auto logits = engine->Step({&in, 1});
    ASSERT_TRUE(logits.ok()) << logits.status();
    EXPECT_TRUE(BitEqual((*logits)[0], all->data() + i * V)) << "position " << i;
  }
}

TEST_P(ForwardConsistencyTest, BatchedSequencesEqualSingleOnes) {
  auto engine = Load(4);
  const int64_t V = engine->config().vocab_size;
  // Three sequences at different positions: prompts of different lengths, then joint decode steps.
  std::vector<std::vector<int32_t>> prompts = {RandomIds(9, 300, 3), RandomIds(14, 300, 4), RandomIds(3, 300, 5)};
  std::vector<int32_t> next = {17, 42, 99};
  std::vector<std::unique_ptr<SequenceState>> kvs;
  std::vector<StepInput> inputs;
  for (auto& p : prompts) {
    kvs.push_back(engine->NewSequence());
    inputs.push_back({kvs.back().get(), p});
  }
  auto batched_prefill = engine->Step(inputs);
  ASSERT_TRUE(batched_prefill.ok()) << batched_prefill.status();
  std::vector<StepInput> decode;
  for (size_t i = 0; i < kvs.size(); ++i) decode.push_back({kvs[i].get(), absl::MakeConstSpan(&next[i], 1)});
  auto batched_decode = engine->Step(decode);
  ASSERT_TRUE(batched_decode.ok());
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> full = prompts[i];
    full.push_back(next[i]);
    auto single = engine->Score(full);
    ASSERT_TRUE(single.ok());
    EXPECT_TRUE(BitEqual((*batched_prefill)[i], single->data() + (prompts[i].size() - 1) * V)) << "seq " << i;
    EXPECT_TRUE(BitEqual((*batched_decode)[i], single->data() + prompts[i].size() * V)) << "seq " << i;
  }
}

TEST_P(ForwardConsistencyTest, LayerRangeSplitsEqualTheWholeRange) {
  auto config = LoadModelConfig(*dir_);
  ASSERT_TRUE(config.ok());
  const int L = config->num_layers;
  const int64_t H = config->hidden_size, V = config->vocab_size;
  ThreadPool pool(2);
  auto whole_w = ModelWeights::Load(*dir_, *config, {0, L, true, true});
  ASSERT_TRUE(whole_w.ok()) << whole_w.status();
  CpuBackend whole(**whole_w, GetParam(), pool);
  const auto ids = RandomIds(15, 300, 6);
  std::vector<float> h_whole(ids.size() * H);
  ASSERT_TRUE(whole.Embed(ids, h_whole.data()).ok());
  auto kv = whole.NewSequence();
  SequenceSlice s{kv.get(), static_cast<int64_t>(ids.size())};
  ASSERT_TRUE(whole.Forward({&s, 1}, h_whole.data()).ok());
  std::vector<float> logits_whole(ids.size() * V);
  ASSERT_TRUE(whole.Logits(h_whole.data(), ids.size(), logits_whole.data()).ok());

  // Every split point, including a stage that holds the single full layer (2) alone.
  for (std::vector<int> cuts : std::vector<std::vector<int>>{{1}, {2}, {3}, {4}, {2, 3}, {1, 2, 3, 4}}) {
    cuts.insert(cuts.begin(), 0);
    cuts.push_back(L);
    std::vector<float> h(ids.size() * H);
    for (size_t st = 0; st + 1 < cuts.size(); ++st) {
      const bool first = st == 0, last = st + 2 == cuts.size();
      auto w = ModelWeights::Load(*dir_, *config, {cuts[st], cuts[st + 1], first, last});
      ASSERT_TRUE(w.ok()) << w.status();
      CpuBackend ex(**w, GetParam(), pool);
      if (first) ASSERT_TRUE(ex.Embed(ids, h.data()).ok());
      auto stage_kv = ex.NewSequence();
      SequenceSlice slice{stage_kv.get(), static_cast<int64_t>(ids.size())};
      ASSERT_TRUE(ex.Forward({&slice, 1}, h.data()).ok());
      if (last) {
        std::vector<float> logits(ids.size() * V);
        ASSERT_TRUE(ex.Logits(h.data(), ids.size(), logits.data()).ok());
        EXPECT_TRUE(BitEqual(logits_whole, logits.data())) << "split with " << cuts.size() - 1 << " stages";
      }
    }
  }
}

// SequenceSlice::outputs: the last layer runs only the rows the caller reads; those rows, and every
// key and value (so the next steps), are bit for bit a full pass's. One slice's image block is cut by
// the rows it skips (it matters on a sliding last layer).
void ExpectLastLayerComputesOnlyTheRowsRead(const std::string& dir, Precision precision, LayerType last_type) {
  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok());
  const int L = config->num_layers;
  const int64_t H = config->hidden_size;
  ASSERT_EQ(config->layer_types[L - 1], last_type);
  ThreadPool pool(2);
  auto w = ModelWeights::Load(dir, *config, {0, L, true, true});
  ASSERT_TRUE(w.ok()) << w.status();
  CpuBackend backend(**w, precision, pool);

  const std::vector<std::vector<int32_t>> prompts = {RandomIds(11, 300, 9), RandomIds(6, 300, 10),
                                                     RandomIds(9, 300, 11), RandomIds(8, 300, 12)};
  const std::vector<int64_t> outputs = {0, 1, 2, -1};
  const std::vector<PositionRange> block = {{3, 8}};  // the third prompt's: rows 7 and 8 are read
  auto run = [&](bool pruned, std::vector<std::unique_ptr<SequenceState>>& kvs, std::vector<float>& h) {
    std::vector<int32_t> ids;
    std::vector<SequenceSlice> slices;
    for (size_t i = 0; i < prompts.size(); ++i) {
      kvs.push_back(backend.NewSequence());
      ids.insert(ids.end(), prompts[i].begin(), prompts[i].end());
      slices.push_back({kvs.back().get(), static_cast<int64_t>(prompts[i].size()),
                        i == 2 ? absl::MakeConstSpan(block) : absl::Span<const PositionRange>(),
                        pruned ? outputs[i] : -1});
    }
    h.assign(ids.size() * H, 0.0f);
    ASSERT_TRUE(backend.Embed(ids, h.data()).ok());
    ASSERT_TRUE(backend.Forward(slices, h.data()).ok());
  };
  std::vector<std::unique_ptr<SequenceState>> full_kv, pruned_kv;
  std::vector<float> full_h, pruned_h;
  run(false, full_kv, full_h);
  run(true, pruned_kv, pruned_h);
  int64_t row0 = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t n = static_cast<int64_t>(prompts[i].size());
    const int64_t read = outputs[i] < 0 ? n : outputs[i];
    const size_t at = static_cast<size_t>((row0 + n - read) * H), count = static_cast<size_t>(read * H);
    EXPECT_EQ(std::memcmp(full_h.data() + at, pruned_h.data() + at, count * sizeof(float)), 0) << "prompt " << i;
    row0 += n;
  }
  // A decode step on both: the same keys and values behind it give the same rows.
  const std::vector<int32_t> next = {5, 6, 7, 8};
  std::vector<float> decoded[2];
  for (int pruned = 0; pruned < 2; ++pruned) {
    auto& kvs = pruned ? pruned_kv : full_kv;
    std::vector<SequenceSlice> slices;
    for (auto& kv : kvs) slices.push_back({kv.get(), 1});
    decoded[pruned].assign(next.size() * H, 0.0f);
    ASSERT_TRUE(backend.Embed(next, decoded[pruned].data()).ok());
    ASSERT_TRUE(backend.Forward(slices, decoded[pruned].data()).ok());
  }
  EXPECT_TRUE(BitEqual(decoded[0], decoded[1].data()));
}

TEST_P(ForwardConsistencyTest, LastLayerComputesOnlyTheRowsRead) {
  ExpectLastLayerComputesOnlyTheRowsRead(*dir_, GetParam(), LayerType::kSliding);
  // The 12B's last layer is a full one (pages, k_eq_v): the same model cut after its full layer.
  RandomCheckpointOptions o = testing_util::SmallModel();
  o.layers = 3;
  static const std::string* full_last = new std::string(testing_util::MakeCheckpoint("fwd_full_last", o));
  ExpectLastLayerComputesOnlyTheRowsRead(*full_last, GetParam(), LayerType::kFull);
}

TEST_P(ForwardConsistencyTest, ThreadCountDoesNotChangeResults) {
  const auto ids = RandomIds(12, 300, 8);
  EngineOptions o;
  o.precision = GetParam();
  o.threads = 1;
  auto one = Engine::Load(*dir_, o);
  ASSERT_TRUE(one.ok());
  o.threads = 3;
  auto three = Engine::Load(*dir_, o);
  ASSERT_TRUE(three.ok());
  auto a = (*one)->Score(ids);
  auto b = (*three)->Score(ids);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(BitEqual(*a, b->data()));
}

TEST_P(ForwardConsistencyTest, BadInputsAreRejectedWithoutSideEffects) {
  auto engine = Load(512);
  auto kv = engine->NewSequence();
  std::vector<int32_t> bad = {2, 5, 300};
  StepInput in{kv.get(), bad};
  auto r = engine->Step({&in, 1});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("token id 300"), std::string::npos) << r.status();
  EXPECT_EQ(kv->length(), 0);
  std::vector<int32_t> empty;
  StepInput none{kv.get(), empty};
  EXPECT_FALSE(engine->Step({&none, 1}).ok());
  std::vector<int32_t> neg = {2, -1};
  EXPECT_FALSE(engine->Score(neg).ok());
}

INSTANTIATE_TEST_SUITE_P(Precisions, ForwardConsistencyTest,
                         ::testing::Values(Precision::kFp32, Precision::kBf16),
                         [](const auto& info) { return info.param == Precision::kFp32 ? "fp32" : "bf16"; });

}  // namespace
}  // namespace layerpipe
