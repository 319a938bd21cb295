// A sequence started from a snapshot of another's caches (the stage-local half of the prefix cache) gives
// bit-identical logits to one that ran the prefix itself: at page-aligned and unaligned cuts, with windows
// shorter than the prefix, any chunking, while the snapshot's own sequence and other forks go on writing.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "engine/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/model/kv_layout.h"
#include "tests/engine/test_util.h"

namespace layerpipe {
namespace {

std::vector<int32_t> RandomIds(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids;
  while (static_cast<int>(ids.size()) < n) ids.push_back(3 + static_cast<int32_t>(rng() % 290));
  return ids;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class PrefixSnapshotTest : public ::testing::TestWithParam<Precision> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing_util::MakeCheckpoint("prefix", testing_util::SmallModel()));
  }
  static void TearDownTestSuite() { delete dir_; }
  std::unique_ptr<Engine> Load(int64_t chunk) {
    EngineOptions o;
    o.precision = GetParam();
    o.prefill_chunk = chunk;
    auto e = Engine::Load(*dir_, o);
    EXPECT_TRUE(e.ok()) << e.status();
    return std::move(*e);
  }
  // Logits after the last id of `ids` run on `kv`.
  static std::vector<float> Last(Engine& e, SequenceState* kv, const std::vector<int32_t>& ids) {
    auto out = e.Step({StepInput{kv, ids}});
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? (*out)[0] : std::vector<float>();
  }
  static std::string* dir_;
};
std::string* PrefixSnapshotTest::dir_ = nullptr;

TEST_P(PrefixSnapshotTest, ForksEqualSequencesThatRanThePrefix) {
  // Cuts inside the first page, at a page boundary and past it; the window (6) is far shorter.
  for (int cut : {37, static_cast<int>(kv::kPageTokens), static_cast<int>(kv::kPageTokens) + 45}) {
    for (int64_t chunk : {512, 7}) {
      auto e = Load(chunk);
      const std::vector<int32_t> prefix = Concat({2}, RandomIds(cut - 1, cut));
      const std::vector<int32_t> a = RandomIds(19, 1), b = RandomIds(23, 2);
      auto origin = e->NewSequence();
      Last(*e, origin.get(), prefix);
      std::unique_ptr<PrefixSnapshot> snap = origin->Snapshot();
      ASSERT_NE(snap, nullptr);
      EXPECT_EQ(snap->length(), cut);
      auto fork_a = e->NewSequenceFrom(*snap);
      auto fork_b = e->NewSequenceFrom(*snap);
      ASSERT_TRUE(fork_a.ok() && fork_b.ok()) << fork_a.status();
      EXPECT_EQ((*fork_a)->length(), cut);
      // Everyone writes after the cut: the origin, then two forks, in turn.
      const std::vector<float> origin_b = Last(*e, origin.get(), b);
      const std::vector<float> got_a = Last(*e, fork_a->get(), a);
      const std::vector<float> got_b = Last(*e, fork_b->get(), b);
      auto fresh = [&](const std::vector<int32_t>& suffix) {
        auto kv = e->NewSequence();
        return Last(*e, kv.get(), Concat(prefix, suffix));
      };
      const std::vector<float> want_a = fresh(a), want_b = fresh(b);
      const size_t bytes = want_a.size() * sizeof(float);
      EXPECT_EQ(std::memcmp(got_a.data(), want_a.data(), bytes), 0) << "cut " << cut << " chunk " << chunk;
      EXPECT_EQ(std::memcmp(got_b.data(), want_b.data(), bytes), 0) << "cut " << cut << " chunk " << chunk;
      EXPECT_EQ(std::memcmp(origin_b.data(), want_b.data(), bytes), 0) << "cut " << cut << " chunk " << chunk;
      // A fork of a fork, after both went on, still starts from the cut.
      auto again = e->NewSequenceFrom(*snap);
      ASSERT_TRUE(again.ok());
      const std::vector<float> got_again = Last(*e, again->get(), a);
      EXPECT_EQ(std::memcmp(got_again.data(), want_a.data(), bytes), 0) << "cut " << cut;
    }
  }
}

// Forks of one long prefix decoding in one batch (many questions about one document) attend the prefix's
// keys together on the full-attention layer (AttentionRunner's shared segments); each gets the bits it
// gets decoding alone.
TEST_P(PrefixSnapshotTest, ForksDecodingTogetherEqualEachAlone) {
  auto e = Load(512);
  const int cut = 1100;  // 4 whole pages: 2 key segments shared
  auto origin = e->NewSequence();
  Last(*e, origin.get(), Concat({2}, RandomIds(cut - 1, 11)));
  auto snap = origin->Snapshot();
  constexpr int kForks = 3, kSteps = 4;
  auto token = [](int fork, int step) { return RandomIds(1, 100 * fork + step + 1)[0]; };
  std::vector<std::vector<std::vector<float>>> alone(kForks);
  for (int f = 0; f < kForks; ++f) {
    auto kv = e->NewSequenceFrom(*snap);
    ASSERT_TRUE(kv.ok());
    for (int t = 0; t < kSteps; ++t) alone[f].push_back(Last(*e, kv->get(), {token(f, t)}));
  }
  std::vector<std::unique_ptr<SequenceState>> kvs;
  for (int f = 0; f < kForks; ++f) {
    auto kv = e->NewSequenceFrom(*snap);
    ASSERT_TRUE(kv.ok());
    kvs.push_back(std::move(*kv));
  }
  for (int t = 0; t < kSteps; ++t) {
    std::vector<std::vector<int32_t>> ids;
    for (int f = 0; f < kForks; ++f) ids.push_back({token(f, t)});
    std::vector<StepInput> batch;
    for (int f = 0; f < kForks; ++f) batch.push_back(StepInput{kvs[f].get(), ids[f]});
    auto out = e->Step(batch);
    ASSERT_TRUE(out.ok()) << out.status();
    for (int f = 0; f < kForks; ++f) {
      ASSERT_EQ((*out)[f].size(), alone[f][t].size());
      EXPECT_EQ(std::memcmp((*out)[f].data(), alone[f][t].data(), alone[f][t].size() * sizeof(float)), 0)
          << "fork " << f << " step " << t;
    }
  }
}

// Whole pages are shared, not copied: below the last whole page a fork reads the origin's very rows; the
// partly filled page and the rings are its own.
TEST_P(PrefixSnapshotTest, WholePagesAreSharedByReference) {
  auto e = Load(512);
  const int64_t page = kv::kPageTokens, cut = 2 * page + 100;
  auto origin = e->NewSequence();
  Last(*e, origin.get(), Concat({2}, RandomIds(static_cast<int>(cut - 1), 9)));
  auto snap = origin->Snapshot();
  EXPECT_EQ(snap->bytes(), origin->bytes());
  auto fork = e->NewSequenceFrom(*snap);
  ASSERT_TRUE(fork.ok());
  EXPECT_EQ((*fork)->bytes(), origin->bytes());
  // Every state here comes from the CPU backend.
  auto& o = static_cast<SequenceKv&>(*origin);
  auto& f = static_cast<SequenceKv&>(**fork);
  const int full = 2, sliding = 1;  // SmallModel: full attention on layer 2
  auto row = [](SequenceKv& kv, int layer, int64_t pos) -> const void* {
    return kv.layer(layer).K<uint8_t>(pos);
  };
  for (int64_t pos : {int64_t{0}, page - 1, page, 2 * page - 1}) {
    EXPECT_EQ(row(f, full, pos), row(o, full, pos)) << "position " << pos << " is on a whole page";
  }
  for (int64_t pos : {2 * page, cut - 1}) {
    EXPECT_NE(row(f, full, pos), row(o, full, pos)) << "position " << pos << " is on the partly filled page";
    EXPECT_EQ(std::memcmp(row(f, full, pos), row(o, full, pos), 16), 0) << "a copy of it";
  }
  EXPECT_NE(row(f, sliding, cut - 1), row(o, sliding, cut - 1)) << "rings are copied";
  EXPECT_EQ(std::memcmp(row(f, sliding, cut - 1), row(o, sliding, cut - 1), 16), 0);
}

TEST_P(PrefixSnapshotTest, ASnapshotOfAnotherLayerRangeIsRefused) {
  auto e = Load(512);
  auto origin = e->NewSequence();
  Last(*e, origin.get(), {2, 5, 6});
  auto snap = origin->Snapshot();
  WeightSelection sel{0, 2, true, false};
  auto weights = ModelWeights::Load(*dir_, e->config(), sel);
  ASSERT_TRUE(weights.ok());
  ThreadPool pool(1);
  CpuBackend other(**weights, GetParam(), pool);
  auto refused = other.NewSequenceFrom(*snap);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "the prefix is not a snapshot of this CPU backend's layers");
}

INSTANTIATE_TEST_SUITE_P(Precisions, PrefixSnapshotTest, ::testing::Values(Precision::kFp32, Precision::kBf16),
                         [](const auto& info) { return std::string(PrecisionName(info.param)); });

}  // namespace
}  // namespace layerpipe
