// Speed of the CUDA backend on a checkpoint of the full 12B shapes: prefill of one long prompt
// (TFLOP/s against the device's dense bf16 peak) and batched decode at a given context (tok/s and the
// HBM bandwidth the step's weight and KV reads imply, against the device's peak), with greedy tokens
// picked on the device; and the head with its pick both ways (logits to the host vs on the device).
//
//   bench_cuda --model /data/12b_shape           # an existing checkpoint
//   bench_cuda --workdir /tmp/layerpipe_bench    # generates (once) a random 48-layer 12B-shaped one
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench_checkpoint.h"
#include "tools/checkpoint/checkpoint_writer.h"
#include "engine/model/config.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/sampling/logit_summary.h"
#include "engine/sampling/sampler.h"
#include "engine/model/weights.h"

ABSL_FLAG(std::string, model, "", "checkpoint directory (empty: generate a 12B-shaped one under --workdir)");
ABSL_FLAG(std::string, workdir, "/tmp/layerpipe_bench", "where a generated checkpoint is kept (reused)");
ABSL_FLAG(int, layers, 48, "layers of the generated checkpoint");
ABSL_FLAG(std::string, precision, "bf16", "bf16 or fp32");
ABSL_FLAG(int, device, 0, "CUDA device index");
ABSL_FLAG(int, prompt_tokens, 4096, "prefill length (one sequence, one chunk)");
ABSL_FLAG(std::string, batches, "1,8", "decode batch sizes");
ABSL_FLAG(int, context, 1024, "tokens each decoding sequence holds before the timed steps");
ABSL_FLAG(int, decode_tokens, 32, "timed decode steps per batch size");
ABSL_FLAG(bool, device_sampling, true, "greedy tokens from device logit summaries (false: logits to the host)");
ABSL_FLAG(double, hbm_gbs, 4800, "device memory bandwidth in GB/s (H200: 4800)");
ABSL_FLAG(double, peak_tflops, 989, "dense bf16 tensor peak in TFLOP/s (H200: 989)");

namespace layerpipe {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::vector<int32_t> Prompt(int n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids{2};
  while (static_cast<int>(ids.size()) < n) ids.push_back(3 + static_cast<int32_t>(rng() % (vocab - 3)));
  return ids;
}

// The head and a greedy pick for `rows` hidden rows: on the device (a LogitRowSummary per row) or
// with the logits copied to the host and the host Sampler.
bool Head(LayerBackend& b, const std::vector<float>& last, int64_t rows, bool on_device) {
  const ModelConfig& c = b.weights().config();
  Sampler greedy(SamplingParams{}, static_cast<int>(c.vocab_size));
  if (on_device) {
    std::vector<LogitRowRequest> requests(static_cast<size_t>(rows), LogitRowRequest{.best = 1});
    std::vector<LogitRowSummary> summaries;
    if (auto st = b.SummarizeLogits(last.data(), requests, &summaries); !st.ok()) {
      return std::fprintf(stderr, "%s\n", st.ToString().c_str()), false;
    }
    int32_t token = 0;
    for (const LogitRowSummary& s : summaries) greedy.SampleFromSummary(s, &token);
    return true;
  }
  std::vector<float> logits(rows * c.vocab_size);
  if (auto st = b.Logits(last.data(), rows, logits.data()); !st.ok()) {
    return std::fprintf(stderr, "%s\n", st.ToString().c_str()), false;
  }
  for (int64_t r = 0; r < rows; ++r) {
    greedy.Sample({logits.data() + r * c.vocab_size, static_cast<size_t>(c.vocab_size)}, {});
  }
  return true;
}

// Embeds, runs the layers and the head over `slices` (the last row of each), as a serving step does.
bool Step(LayerBackend& b, std::vector<SequenceSlice>& slices, const std::vector<int32_t>& ids) {
  const ModelConfig& c = b.weights().config();
  std::vector<float> h(ids.size() * c.hidden_size);
  if (auto st = b.Embed(ids, h.data()); !st.ok()) return std::fprintf(stderr, "%s\n", st.ToString().c_str()), false;
  if (auto st = b.Forward(slices, h.data()); !st.ok()) return std::fprintf(stderr, "%s\n", st.ToString().c_str()), false;
  // The head on the last row of every slice.
  std::vector<float> last;
  int64_t row = 0;
  for (const SequenceSlice& s : slices) {
    row += s.n;
    last.insert(last.end(), h.begin() + (row - 1) * c.hidden_size, h.begin() + row * c.hidden_size);
  }
  return Head(b, last, static_cast<int64_t>(slices.size()), absl::GetFlag(FLAGS_device_sampling));
}

// Milliseconds per head + greedy pick for `rows` rows, each way.
bool CompareHeads(LayerBackend& b, int64_t rows) {
  const ModelConfig& c = b.weights().config();
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> last(rows * c.hidden_size);
  for (float& v : last) v = normal(rng);
  double ms[2];
  for (int on_device = 0; on_device < 2; ++on_device) {
    if (!Head(b, last, rows, on_device)) return false;  // warm-up
    constexpr int kReps = 20;
    auto t0 = Clock::now();
    for (int i = 0; i < kReps; ++i) {
      if (!Head(b, last, rows, on_device)) return false;
    }
    ms[on_device] = 1e3 * Seconds(t0, Clock::now()) / kReps;
  }
  std::printf("head + greedy pick, %lld rows: logits to host %.3f ms, sampled on the device %.3f ms\n",
              static_cast<long long>(rows), ms[0], ms[1]);
  return true;
}

// Multiply-adds ×2 of attention for a query at `pos` in layer l (scores and the weighted sum).
double AttentionFlops(const ModelConfig& c, int l, int64_t pos) {
  const int64_t keys = c.layer_types[l] == LayerType::kFull ? pos + 1 : std::min<int64_t>(pos + 1, c.sliding_window);
  return 2.0 * 2.0 * c.num_heads * c.HeadDim(l) * keys;
}

// KV bytes a decode step reads for one sequence at context `ctx`.
double KvReadBytes(const ModelConfig& c, int64_t ctx, double elem) {
  double b = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    const int64_t keys = c.layer_types[l] == LayerType::kFull ? ctx + 1 : std::min<int64_t>(ctx + 1, c.sliding_window);
    b += 2.0 * keys * c.KvHeads(l) * c.HeadDim(l) * elem;
  }
  return b;
}

int Run(const std::string& dir) {
  Precision precision;
  if (!ParsePrecision(absl::GetFlag(FLAGS_precision), &precision)) {
    std::fprintf(stderr, "--precision must be bf16 or fp32\n");
    return 2;
  }
  auto config = LoadModelConfig(dir);
  if (!config.ok()) return std::fprintf(stderr, "%s\n", config.status().ToString().c_str()), 1;
  const ModelConfig& c = *config;
  auto weights = ModelWeights::Load(dir, c, {0, c.num_layers, true, true});
  if (!weights.ok()) return std::fprintf(stderr, "%s\n", weights.status().ToString().c_str()), 1;
  auto t_load = Clock::now();
  auto backend = MakeCudaBackend(**weights, precision, absl::GetFlag(FLAGS_device));
  if (!backend.ok()) return std::fprintf(stderr, "%s\n", backend.status().ToString().c_str()), 1;
  LayerBackend& b = **backend;
  std::printf("device %s, %s, %d layers, weights uploaded in %.1f s\n", b.device().c_str(),
              absl::GetFlag(FLAGS_precision).c_str(), c.num_layers, Seconds(t_load, Clock::now()));

  double layer_bytes = 0;
  for (int l = 0; l < c.num_layers; ++l) layer_bytes += static_cast<double>((*weights)->LayerMatrixBytes(l));
  const double head_bytes = static_cast<double>((*weights)->embed_tokens().bytes());
  const double elem = precision == Precision::kBf16 ? 2 : 4;
  const double hbm = absl::GetFlag(FLAGS_hbm_gbs), peak = absl::GetFlag(FLAGS_peak_tflops);

  {  // Warm-up: cuBLASLt plans, first allocations.
    auto kv = b.NewSequence();
    std::vector<SequenceSlice> s = {{kv.get(), 16}};
    if (!Step(b, s, Prompt(16, c.vocab_size, 99))) return 1;
  }

  const int n = absl::GetFlag(FLAGS_prompt_tokens);
  if (n > 0) {
    auto kv = b.NewSequence();
    std::vector<SequenceSlice> s = {{kv.get(), n}};
    const auto ids = Prompt(n, c.vocab_size, 1);
    auto t0 = Clock::now();
    if (!Step(b, s, ids)) return 1;
    const double secs = Seconds(t0, Clock::now());
    double flops = 2.0 * (layer_bytes / 2) * n + 2.0 * (head_bytes / 2);
    for (int l = 0; l < c.num_layers; ++l) {
      for (int64_t p = 0; p < n; ++p) flops += AttentionFlops(c, l, p);
    }
    const double tflops = flops / secs / 1e12;
    std::printf("prefill %d tokens: %.3f s  %.0f tok/s  %.1f TFLOP/s  (%.1f%% of %.0f peak)\n", n, secs, n / secs,
                tflops, 100 * tflops / peak, peak);
  }

  for (int64_t rows : {1, 8}) {
    if (!CompareHeads(b, rows)) return 1;
  }

  const int ctx = std::max(1, absl::GetFlag(FLAGS_context)), steps = std::max(1, absl::GetFlag(FLAGS_decode_tokens));
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_batches), ',', absl::SkipWhitespace())) {
    int batch = 0;
    if (!absl::SimpleAtoi(part, &batch) || batch <= 0) return std::fprintf(stderr, "--batches: bad size\n"), 2;
    std::vector<std::unique_ptr<SequenceState>> kvs;
    for (int i = 0; i < batch; ++i) {
      kvs.push_back(b.NewSequence());
      std::vector<SequenceSlice> s = {{kvs.back().get(), ctx}};
      if (!Step(b, s, Prompt(ctx, c.vocab_size, 10 + i))) return 1;
    }
    std::vector<SequenceSlice> slices;
    for (auto& kv : kvs) slices.push_back({kv.get(), 1});
    std::vector<int32_t> next(batch, 5);
    // Two untimed steps: the first captures the decode graph.
    for (int w = 0; w < 2; ++w) {
      if (!Step(b, slices, next)) return 1;
    }
    auto t0 = Clock::now();
    for (int s = 0; s < steps; ++s) {
      if (!Step(b, slices, next)) return 1;
    }
    const double secs = Seconds(t0, Clock::now());
    const int64_t mid_ctx = ctx + 2 + steps / 2;
    const double step_bytes = layer_bytes + head_bytes + batch * KvReadBytes(c, mid_ctx, elem);
    const double gbs = step_bytes * steps / secs / 1e9;
    std::printf("decode batch %d at context %d: %.2f ms/step  %.1f tok/s  %.2f GB/step  %.0f GB/s  (%.1f%% of %.0f)\n",
                batch, ctx, 1e3 * secs / steps, batch * steps / secs, step_bytes / 1e9, gbs, 100 * gbs / hbm, hbm);
  }
  return 0;
}

}  // namespace
}  // namespace layerpipe

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using namespace layerpipe;
  if (CudaDeviceCount() == 0) {
    std::fprintf(stderr, "no CUDA device visible\n");
    return 1;
  }
  std::string dir = absl::GetFlag(FLAGS_model);
  if (dir.empty()) {
    auto made = TwelveBShapeCheckpoint(absl::GetFlag(FLAGS_workdir), absl::GetFlag(FLAGS_layers));
    if (!made.ok()) {
      std::fprintf(stderr, "%s\n", std::string(made.status().message()).c_str());
      return 1;
    }
    dir = *made;
  }
  return Run(dir);
}
