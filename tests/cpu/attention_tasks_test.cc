// AttentionRunner spreads a layer's attention over threads by GQA groups, rows, heads or (decode over a
// long context) key segments; none of it may change a bit. Checked on the 12B's two attention layouts
// with contexts of several key segments: prefill in chunks, then decode steps, batched with a second,
// shorter sequence, across thread counts that take each of those plans.
#include "engine/cpu/attention_tasks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "engine/cpu/kv_cache.h"
#include "engine/model/bf16.h"

namespace layerpipe {
namespace {

struct Layout {
  int heads, kv_heads, hd;
  int64_t window;
};

struct Sequence {
  int64_t tokens;
  std::vector<int64_t> chunks;  // prefill chunk sizes, then one token at a time
};

// Per sequence: outputs of every token, [tokens][heads·hd]; *segment_tasks: how many tasks took key
// segments.
std::vector<std::vector<float>> RunSteps(const Layout& l, Precision precision, const std::vector<Sequence>& seqs,
                                         int threads, int64_t* segment_tasks) {
  const int64_t qw = l.heads * l.hd, kw = l.kv_heads * l.hd;
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 0.7f);
  struct State {
    std::vector<float> q, k, v, out;
    std::unique_ptr<LayerKvCache> cache;
    int64_t done = 0;
    size_t next_chunk = 0;
  };
  std::vector<State> states(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    State& st = states[i];
    st.q.resize(seqs[i].tokens * qw);
    st.k.resize(seqs[i].tokens * kw);
    st.v.resize(st.k.size());
    st.out.assign(seqs[i].tokens * qw, NAN);
    for (float& x : st.q) x = d(rng);
    for (float& x : st.k) x = Bf16ToF32(F32ToBf16(d(rng)));
    for (float& x : st.v) x = Bf16ToF32(F32ToBf16(d(rng)));
    st.cache = std::make_unique<LayerKvCache>(l.window > 0, l.window, kw, precision);
  }
  ThreadPool pool(threads);
  AttentionRunner runner;
  for (bool busy = true; busy;) {  // one batched step per iteration, as CpuBackend::Forward runs them
    busy = false;
    std::vector<AttentionChunk> chunks;
    std::vector<State*> stepped;
    for (size_t i = 0; i < seqs.size(); ++i) {
      State& st = states[i];
      if (st.done == seqs[i].tokens) continue;
      const int64_t n = std::min(seqs[i].tokens - st.done,
                                 st.next_chunk < seqs[i].chunks.size() ? seqs[i].chunks[st.next_chunk++] : 1);
      chunks.push_back({st.cache.get(), precision, st.done, n, l.window, st.q.data() + st.done * qw, qw,
                        st.k.data() + st.done * kw, st.v.data() + st.done * kw, kw, st.out.data() + st.done * qw,
                        qw});
      st.done += n;
      busy = true;
    }
    runner.Run(chunks, l.heads, l.kv_heads, l.hd, pool);
  }
  *segment_tasks = runner.segment_tasks_run();
  std::vector<std::vector<float>> outs;
  for (State& st : states) outs.push_back(std::move(st.out));
  return outs;
}

TEST(AttentionRunnerTest, BitIdenticalAcrossThreadCountsAndPlans) {
  const Layout layouts[] = {
      {16, 1, 64, 0},   // global: one KV head for 16 query heads, keys split by segment when idle
      {8, 4, 32, 700},  // sliding, a window of two segments: split by heads, then by segments
  };
  // A long sequence prefilled in chunks and then decoded, next to a short one that joins and ends early.
  const std::vector<Sequence> seqs = {{1400, {600, 500}}, {40, {30}}};
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    for (const Layout& l : layouts) {
      int64_t segment_tasks = 0;
      const auto base = RunSteps(l, precision, seqs, 1, &segment_tasks);
      EXPECT_EQ(segment_tasks, 0);  // one thread is never idle: whole tasks only
      for (int threads : {2, 3, 8, 24}) {
        const auto got = RunSteps(l, precision, seqs, threads, &segment_tasks);
        // With more threads than tasks, decode over the long context takes key segments.
        if (threads >= 8) EXPECT_GT(segment_tasks, 0) << "threads " << threads;
        for (size_t i = 0; i < seqs.size(); ++i) {
          for (float x : got[i]) ASSERT_TRUE(std::isfinite(x));
          EXPECT_EQ(std::memcmp(got[i].data(), base[i].data(), sizeof(float) * got[i].size()), 0)
              << "heads " << l.heads << " window " << l.window << " threads " << threads << " sequence " << i;
        }
      }
    }
  }
}

// A few rows over a long context (a prompt's last chunk, a short question after a long document) leave
// threads idle with one group to attend: its keys are split by segment, as decode's are, and the bits stay.
TEST(AttentionRunnerTest, AShortChunkOverALongContextSplitsItsKeys) {
  const Layout global{16, 1, 64, 0};
  const std::vector<Sequence> seqs = {{1100, {1096, 4}}};  // 4 rows x 16 heads over 3 segments of keys
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    int64_t segment_tasks = 0;
    const auto base = RunSteps(global, precision, seqs, 1, &segment_tasks);
    const auto split = RunSteps(global, precision, seqs, 2, &segment_tasks);
    EXPECT_EQ(segment_tasks, 3);  // the 4-row chunk's; the 1096-row one goes in whole tasks
    EXPECT_EQ(std::memcmp(split[0].data(), base[0].data(), sizeof(float) * base[0].size()), 0);
  }
}

// Sequences that started from one prefix (the prefix cache's forks: whole pages shared) decode in one
// batch beside one that did not: the prefix's segments are attended once for the forks' vectors together
// (per KV head, in groups of at most kMaxSharedVectors), the rest apart, and every sequence gets the bits
// it gets alone.
TEST(AttentionRunnerTest, ForksOfOnePrefixAttendItTogetherWithTheBitsEachGetsAlone) {
  const Layout layouts[] = {{16, 1, 64, 0}, {8, 2, 32, 0}};
  const int64_t prefix = 1300;  // 5 whole pages below the cut: 2 key segments shared
  // 11 forks (a group of 8 and one of 3 with the global layout's 16 heads a KV head, one group with the
  // other's 4), and a sequence with a prefix of its own.
  constexpr int kSequences = 12, kSteps = 3;
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    for (const Layout& l : layouts) {
      SCOPED_TRACE(testing::Message() << "heads " << l.heads << " kv heads " << l.kv_heads);
      const int64_t qw = l.heads * l.hd, kw = l.kv_heads * l.hd;
      std::mt19937 rng(3);
      std::normal_distribution<float> d(0.0f, 0.7f);
      auto random_rows = [&](int64_t n, int64_t width, bool round) {
        std::vector<float> x(n * width);
        for (float& v : x) v = round ? Bf16ToF32(F32ToBf16(d(rng))) : d(rng);
        return x;
      };
      auto fill = [&](LayerKvCache& cache) {
        cache.Reserve(prefix);
        for (int64_t p = 0; p < prefix; ++p) {
          const std::vector<float> k = random_rows(1, kw, true), v = random_rows(1, kw, true);
          if (precision == Precision::kFp32) {
            std::memcpy(cache.K<float>(p), k.data(), kw * sizeof(float));
            std::memcpy(cache.V<float>(p), v.data(), kw * sizeof(float));
          } else {
            F32ToBf16Row(k.data(), cache.K<uint16_t>(p), kw);
            F32ToBf16Row(v.data(), cache.V<uint16_t>(p), kw);
          }
        }
      };
      LayerKvCache root(false, 0, kw, precision), other(false, 0, kw, precision);
      fill(root);
      fill(other);
      struct Step {
        std::vector<float> q, k, v;
      };
      std::vector<std::vector<Step>> steps(kSequences);
      for (auto& seq : steps) {
        for (int t = 0; t < kSteps; ++t) {
          seq.push_back({random_rows(1, qw, false), random_rows(1, kw, true), random_rows(1, kw, true)});
        }
      }
      auto start = [&](int s) { return s + 1 < kSequences ? root.Frozen(prefix) : other.Frozen(prefix); };
      ThreadPool pool(3);
      // outputs[s][t]: sequence s's step t, alone (one sequence a Run) or together (all of them).
      auto decode = [&](bool together, int64_t* shared_tasks, int64_t max_shared_bytes) {
        std::vector<LayerKvCache> caches;
        for (int s = 0; s < kSequences; ++s) caches.push_back(start(s));
        std::vector<std::vector<std::vector<float>>> out(kSequences, std::vector<std::vector<float>>(kSteps));
        AttentionRunner runner(max_shared_bytes);
        for (int t = 0; t < kSteps; ++t) {
          std::vector<AttentionChunk> chunks;
          for (int s = 0; s < kSequences; ++s) {
            Step& st = steps[s][t];
            out[s][t].assign(qw, NAN);
            chunks.push_back({&caches[s], precision, prefix + t, 1, 0, st.q.data(), qw, st.k.data(), st.v.data(), kw,
                              out[s][t].data(), qw});
          }
          if (together) {
            runner.Run(chunks, l.heads, l.kv_heads, l.hd, pool);
          } else {
            for (const AttentionChunk& c : chunks) runner.Run({c}, l.heads, l.kv_heads, l.hd, pool);
          }
        }
        *shared_tasks = runner.shared_tasks_run();
        return out;
      };
      int64_t shared_alone = 0, shared_together = 0, shared_over_budget = 0;
      const auto alone = decode(false, &shared_alone, AttentionRunner::kMaxSharedBytes);
      const auto together = decode(true, &shared_together, AttentionRunner::kMaxSharedBytes);
      // Partials of 2 forks' vectors x 2 segments x hd floats do not fit in 1 KiB: each attends alone.
      const auto over_budget = decode(true, &shared_over_budget, 1024);
      EXPECT_EQ(shared_alone, 0);
      // The groups' 2 shared segments, per KV head and step.
      const int forks = kSequences - 1, group = l.heads / l.kv_heads;
      const int per_group = AttentionRunner::kMaxSharedVectors / group;
      const int groups = forks / per_group + (forks % per_group >= 2 ? 1 : 0);
      EXPECT_EQ(shared_together, groups * 2 * l.kv_heads * kSteps);
      EXPECT_EQ(shared_over_budget, 0);
      for (int s = 0; s < kSequences; ++s) {
        for (int t = 0; t < kSteps; ++t) {
          for (float x : together[s][t]) ASSERT_TRUE(std::isfinite(x));
          EXPECT_EQ(std::memcmp(together[s][t].data(), alone[s][t].data(), sizeof(float) * qw), 0)
              << "sequence " << s << " step " << t;
          EXPECT_EQ(std::memcmp(over_budget[s][t].data(), alone[s][t].data(), sizeof(float) * qw), 0)
              << "sequence " << s << " step " << t;
        }
      }
    }
  }
}

// The runner multiplies bf16 pairs exactly in the layers Bf16Pairs names (GQA groups, where the CPU
// runs the matmuls on vdpbf16ps): its results are those of the products it chose, not the others'.
TEST(AttentionRunnerTest, GqaGroupsMultiplyBf16PairsWhereTheCpuRunsThem) {
  EXPECT_EQ(AttentionRunner::Bf16Pairs(Precision::kBf16, 16, 1), AttentionBf16DotDefault());  // global layer
  EXPECT_EQ(AttentionRunner::Bf16Pairs(Precision::kBf16, 16, 8), AttentionBf16DotDefault());  // sliding: groups of 2
  EXPECT_FALSE(AttentionRunner::Bf16Pairs(Precision::kBf16, 8, 8));  // one query head a KV head
  EXPECT_FALSE(AttentionRunner::Bf16Pairs(Precision::kFp32, 16, 1));

  // The global layer's group of 16 and the sliding layers' group of 2, each over one KV head.
  for (const int heads : {16, 2}) {
    SCOPED_TRACE(heads);
    const int hd = 64;
    const int64_t n = 300, qw = heads * hd;
    std::mt19937 rng(9);
    std::normal_distribution<float> d(0.0f, 0.7f);
    std::vector<float> q(n * qw), k(n * hd), v(n * hd);
    for (float& x : q) x = d(rng);
    for (float& x : k) x = Bf16ToF32(F32ToBf16(d(rng)));
    for (float& x : v) x = Bf16ToF32(F32ToBf16(d(rng)));
    // The whole chunk through the runner (2 threads), or through AttendHeads with the given products.
    auto attend = [&](bool runner, bool pairs) {
      LayerKvCache cache(false, 0, hd, Precision::kBf16);
      std::vector<float> out(n * qw, NAN);
      const AttentionChunk c{&cache, Precision::kBf16, 0, n, 0, q.data(), qw, k.data(), v.data(), hd, out.data(), qw};
      if (runner) {
        ThreadPool pool(2);
        AttentionRunner().Run({c}, heads, 1, hd, pool);
      } else {
        AttentionScratch scratch;
        scratch.bf16_dot = pairs;
        AttendHeads(c, 0, heads, 0, hd, 0, n, scratch);
      }
      return out;
    };
    const std::vector<float> ran = attend(true, false);
    const std::vector<float> chosen = attend(false, AttentionBf16DotDefault());
    EXPECT_EQ(std::memcmp(ran.data(), chosen.data(), sizeof(float) * ran.size()), 0);
    if (AttentionBf16DotDefault()) {
      const std::vector<float> fp32 = attend(false, false);
      EXPECT_NE(std::memcmp(ran.data(), fp32.data(), sizeof(float) * ran.size()), 0);
    }
  }
}

}  // namespace
}  // namespace layerpipe
