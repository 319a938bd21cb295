// Throughput of the CPU attention (engine/cpu/attention_tasks.h) on the Gemma 4 12B layer shapes, apart
// from the rest of a layer: a chunk of new tokens against a cache already holding `context` positions,
// as a long prompt's prefill steps and a decode step over a long context meet it; or chunks of several
// sequences started from one cached prefix of `context` positions (the prefix cache's forks: many
// questions about one document), in one batch ("together") and one sequence a call ("apart").
//
// GFLOP/s counts the scores and the weighted sums of the keys each query sees (4 · head_dim flops per
// query head and key); the % is of the peak of the products the layer runs on: fp32 multiply-adds, or
// bf16 pairs on vdpbf16ps (AttentionRunner::Bf16Pairs).
//
// Usage: bench_attention [--quick] [--cold] [--precision=bf16|fp32] [--case=global|sliding,CONTEXT,ROWS[,FORKS]]
// Threads: $LAYERPIPE_THREADS (default: all hardware threads).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench_peaks.h"
#include "engine/cpu/aligned_vector.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/attention_tasks.h"
#include "engine/cpu/kv_cache.h"
#include "engine/cpu/thread_pool.h"
#include "engine/model/bf16.h"

namespace layerpipe {
namespace {

struct Layer {
  const char* name;
  int heads, kv_heads, head_dim;
  int64_t window;  // 0: full attention
  int64_t joined;  // the cache's joined rows, as the engine keeps them (engine/model/kv_bytes.h KvJoinedValues)
};
constexpr Layer kGlobal = {"global", 16, 1, 512, 0, 128};  // k_eq_v, 64 of 256 pairs rotate
constexpr Layer kSliding = {"sliding", 16, 8, 256, 1024, 0};

struct Case {
  Layer layer;
  int64_t context, n;
  int forks = 1;  // sequences started from one prefix of `context` positions, each with a chunk of n rows
};

AlignedVector<float> Random(size_t count, float stddev, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, stddev);
  AlignedVector<float> v(count);
  for (auto& e : v) e = dist(rng);
  return v;
}

// "global,32768,1[,4]": a layer, the context before the chunk, the chunk's rows and the forks.
bool ParseCase(const std::string& text, std::optional<Case>* out) {
  const std::vector<std::string> parts = absl::StrSplit(text, ',');
  int64_t context = 0, rows = 0;
  int forks = 1;
  if ((parts.size() != 3 && parts.size() != 4) || !absl::SimpleAtoi(parts[1], &context) ||
      !absl::SimpleAtoi(parts[2], &rows) || (parts.size() == 4 && !absl::SimpleAtoi(parts[3], &forks)) ||
      context < 0 || rows < 1 || forks < 1) {
    return false;
  }
  if (parts[0] == "global") {
    *out = Case{kGlobal, context, rows, forks};
  } else if (parts[0] == "sliding") {
    *out = Case{kSliding, context, rows, forks};
  } else {
    return false;
  }
  return true;
}

// Flops of the keys every row of the chunk sees.
double Flops(const Case& c) {
  double keys = 0;
  for (int64_t i = 0; i < c.n; ++i) {
    const int64_t p = c.context + i;
    keys += c.layer.window > 0 ? std::min<int64_t>(p + 1, c.layer.window) : p + 1;
  }
  return keys * c.layer.heads * c.layer.head_dim * 4.0 * c.forks;
}

// Seconds of one Run over the chunk, best of `reps`; with forks, of the forks' chunks in one Run
// (`together`) or in one Run each.
double Time(const Case& c, Precision precision, int reps, bool cold, bool together, ThreadPool& pool,
            std::mt19937& rng) {
  const Layer& l = c.layer;
  const int64_t kw = int64_t(l.kv_heads) * l.head_dim, qw = int64_t(l.heads) * l.head_dim;
  LayerKvCache cache(l.window > 0, l.window > 0 ? l.window : 1, kw, precision, l.joined);
  cache.Reserve(c.context + c.n);
  const int64_t first = l.window > 0 ? std::max<int64_t>(0, c.context - l.window) : 0;
  const AlignedVector<float> old = Random(static_cast<size_t>(kw * 2), 1.0f, rng);
  for (int64_t p = first; p < c.context; ++p) {  // the same two rows everywhere: reading them is what counts
    if (precision == Precision::kFp32) {
      std::copy(old.begin(), old.begin() + kw, cache.K<float>(p));
      std::copy(old.begin() + kw, old.end(), cache.V<float>(p));
    } else {
      F32ToBf16Row(old.data(), cache.K<uint16_t>(p), kw);
      F32ToBf16Row(old.data() + kw, cache.V<uint16_t>(p), kw);
    }
  }
  // Forks hold the prefix's whole pages by reference, as the prefix cache starts them (kv_cache.h).
  std::vector<LayerKvCache> forks;
  for (int f = 1; f < c.forks; ++f) {
    forks.push_back(cache.Frozen(c.context));
    forks.back().Reserve(c.context + c.n);
  }
  const int64_t rows = c.n * c.forks;
  AlignedVector<float> q = Random(static_cast<size_t>(rows * qw), 0.05f, rng);
  AlignedVector<float> k = Random(static_cast<size_t>(rows * kw), 1.0f, rng);
  AlignedVector<float> v = Random(static_cast<size_t>(rows * kw), 1.0f, rng);
  if (precision == Precision::kBf16) {  // chunk rows arrive rounded to the cache's precision
    RoundRowToBf16(k.data(), k.data(), static_cast<int64_t>(k.size()));
    RoundRowToBf16(v.data(), v.data(), static_cast<int64_t>(v.size()));
  }
  AlignedVector<float> out(static_cast<size_t>(rows * qw));  // as the engine's step buffers
  std::vector<AttentionChunk> chunks;
  for (int f = 0; f < c.forks; ++f) {
    const int64_t r = f * c.n;
    chunks.push_back({f == 0 ? &cache : &forks[f - 1], precision, c.context, c.n, l.window, q.data() + r * qw, qw,
                      k.data() + r * kw, v.data() + r * kw, kw, out.data() + r * qw, qw});
  }
  AttentionRunner runner;
  auto run = [&] {
    if (together) {
      runner.Run(chunks, l.heads, l.kv_heads, l.head_dim, pool);
    } else {
      for (const AttentionChunk& chunk : chunks) runner.Run({chunk}, l.heads, l.kv_heads, l.head_dim, pool);
    }
  };
  if (!cold) return bench::BestTime(reps, run);
  // Between decode steps every layer's weights stream through the caches, so a step meets its KV rows
  // in DRAM: read a buffer larger than the last-level cache before each (untimed) call, on all the
  // pool's threads, so that none of them is asleep when the call starts (as between layers).
  static AlignedVector<float> flush(size_t{1} << 28, 1.0f);  // 1 GiB
  const int64_t lines = static_cast<int64_t>(flush.size() / 16);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    pool.ParallelFor(pool.size(), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float sum = 0;
        for (int64_t i = lines * t / pool.size(); i < lines * (t + 1) / pool.size(); ++i) sum += flush[i * 16];
        flush[t * 16] += sum * 1e-30f;  // keeps the reads
      }
    });
    best = std::min(best, bench::BestTime(1, run));
  }
  return best;
}

int Main(int argc, char** argv) {
  bool quick = false, cold = false;
  Precision precision = Precision::kBf16;
  std::optional<Case> only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--cold") {
      cold = true;
    } else if (a == "--precision=bf16") {
      precision = Precision::kBf16;
    } else if (a == "--precision=fp32") {
      precision = Precision::kFp32;
    } else if (a.rfind("--case=", 0) == 0) {
      if (!ParseCase(a.substr(7), &only)) {
        std::fprintf(stderr, "--case wants global|sliding,CONTEXT,ROWS[,FORKS] (ROWS, FORKS >= 1), not %s\n",
                     a.c_str() + 7);
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--cold] [--precision=bf16|fp32] "
                   "[--case=global|sliding,CONTEXT,ROWS[,FORKS]]\n",
                   argv[0]);
      return 2;
    }
  }
  ThreadPool& pool = DefaultThreadPool();
  const bench::Peaks peaks = bench::MeasurePeaks(pool);
  const bool wide = AttentionAvx512Default();
  const double peak = wide ? peaks.fma512 : peaks.fma;
  std::printf("threads: %d   cache: %s, %s   tiles: %s   fp32 FMA peak on them: %.1f GFLOP/s", pool.size(),
              precision == Precision::kBf16 ? "bf16" : "fp32", cold ? "read from DRAM (--cold)" : "warm",
              wide ? "512-bit" : "256-bit", peak);
  if (peaks.bf16_dot > 0) std::printf("   vdpbf16ps peak: %.1f GFLOP/s", peaks.bf16_dot);
  std::printf("\n%-8s %4s %3s %4s %7s %5s %5s %8s %10s %9s\n", "layer", "q", "kv", "dim", "context", "rows", "forks",
              "products", "ms/call", "GFLOP/s");
  std::vector<Case> cases = {
      {kGlobal, 0, 512},     {kGlobal, 4096, 512}, {kGlobal, 16384, 512}, {kSliding, 4096, 512},
      {kGlobal, 32768, 1},   {kSliding, 32768, 1}, {kGlobal, 32768, 8},   {kGlobal, 32768, 1, 4},
  };
  if (quick) cases = {{kGlobal, 4096, 512}, {kSliding, 4096, 512}, {kGlobal, 32768, 1}};
  if (only) cases = {*only};
  std::mt19937 rng(1234);
  for (const Case& c : cases) {
    const int reps = c.n == 1 ? 20 : 3;
    const bool pairs = AttentionRunner::Bf16Pairs(precision, c.layer.heads, c.layer.kv_heads);
    for (const bool together : {true, false}) {
      if (!together && c.forks == 1) break;
      const double t = Time(c, precision, reps, cold, together, pool, rng);
      const double gflops = Flops(c) / t / 1e9;
      std::printf("%-8s %4d %3d %4d %7lld %5lld %5d %8s %10.3f %9.1f (%3.0f%%)%s\n", c.layer.name, c.layer.heads,
                  c.layer.kv_heads, c.layer.head_dim, static_cast<long long>(c.context), static_cast<long long>(c.n),
                  c.forks, pairs ? "bf16x2" : "fp32", t * 1e3, gflops, 100 * gflops / (pairs ? peaks.bf16_dot : peak),
                  c.forks == 1 ? "" : together ? "  together" : "  apart");
    }
  }
  return 0;
}

}  // namespace
}  // namespace layerpipe

int main(int argc, char** argv) { return layerpipe::Main(argc, argv); }
