// Prefill and decode speed of the CPU engine on generated checkpoints of the real 12B layer shapes
// (full 262,144 vocabulary), with the weight bytes a decode step reads and the bandwidth that implies.
//
//   bench_engine --layers 6,12 --workdir /tmp/layerpipe_bench
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
#include "engine/engine.h"

ABSL_FLAG(std::string, layers, "6,12", "layer counts of the generated 12B-shaped checkpoints");
ABSL_FLAG(std::string, workdir, "/tmp/layerpipe_bench", "where generated checkpoints are kept (reused)");
ABSL_FLAG(std::string, model, "", "benchmark this checkpoint instead of generated ones");
ABSL_FLAG(int, prompt_tokens, 256, "prefill length");
ABSL_FLAG(int, decode_tokens, 16, "decode steps measured");
ABSL_FLAG(int, batch, 1, "sequences decoded together");
ABSL_FLAG(std::string, precision, "bf16", "bf16 or fp32");
ABSL_FLAG(int, threads, 0, "threads (0: all cores)");

namespace layerpipe {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

int Bench(const std::string& dir, const std::string& label) {
  EngineOptions o;
  if (!ParsePrecision(absl::GetFlag(FLAGS_precision), &o.precision)) {
    std::fprintf(stderr, "--precision must be bf16 or fp32\n");
    return 2;
  }
  o.threads = absl::GetFlag(FLAGS_threads);
  o.prefill_chunk = absl::GetFlag(FLAGS_prompt_tokens);
  auto engine = Engine::Load(dir, o);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", std::string(engine.status().message()).c_str());
    return 1;
  }
  Engine& e = **engine;
  const ModelConfig& c = e.config();
  std::mt19937 rng(1);
  const int n = absl::GetFlag(FLAGS_prompt_tokens), steps = absl::GetFlag(FLAGS_decode_tokens);
  const int batch = std::max(1, absl::GetFlag(FLAGS_batch));
  std::vector<std::vector<int32_t>> prompts(batch);
  for (auto& p : prompts) {
    p.push_back(2);
    while (static_cast<int>(p.size()) < n) p.push_back(3 + static_cast<int32_t>(rng() % (c.vocab_size - 3)));
  }
  // Warm the page cache and the thread pool so the numbers measure compute, not first-touch I/O.
  {
    auto kv = e.NewSequence();
    std::vector<int32_t> warm(prompts[0].begin(), prompts[0].begin() + 8);
    StepInput in{kv.get(), warm};
    if (auto r = e.Step({&in, 1}); !r.ok()) return 1;
  }
  std::vector<std::unique_ptr<SequenceState>> kvs;
  std::vector<StepInput> inputs;
  for (auto& p : prompts) {
    kvs.push_back(e.NewSequence());
    inputs.push_back({kvs.back().get(), p});
  }
  auto t0 = Clock::now();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (auto r = e.Step({&inputs[i], 1}); !r.ok()) return 1;
  }
  auto t1 = Clock::now();
  std::vector<int32_t> next(batch, 5);
  std::vector<StepInput> decode;
  for (int b = 0; b < batch; ++b) decode.push_back({kvs[b].get(), absl::MakeConstSpan(&next[b], 1)});
  for (int s = 0; s < steps; ++s) {
    auto r = e.Step(decode);
    if (!r.ok()) return 1;
  }
  auto t2 = Clock::now();

  double layer_bytes = 0;
  for (int l = 0; l < c.num_layers; ++l) layer_bytes += static_cast<double>(e.weights().LayerMatrixBytes(l));
  const double head_bytes = static_cast<double>(e.weights().embed_tokens().bytes());
  const double step_bytes = layer_bytes + head_bytes;
  const double prefill_s = Seconds(t0, t1), decode_s = Seconds(t1, t2);
  // 2 flops per weight per token for the layer matmuls; the head runs once per prompt.
  const double prefill_flops = 2.0 * (layer_bytes / 2) * n * batch + 2.0 * (head_bytes / 2) * batch;
  std::printf("%-28s prefill %6d tok: %8.1f tok/s  %6.1f GFLOP/s | decode batch %d: %7.2f tok/s  %6.2f ms/step"
              "  weights %.2f GB/step  %5.1f GB/s\n",
              label.c_str(), n, n * batch / prefill_s, prefill_flops / prefill_s / 1e9, batch,
              steps * batch / decode_s, 1e3 * decode_s / steps, step_bytes / 1e9, step_bytes * steps / decode_s / 1e9);
  return 0;
}

}  // namespace
}  // namespace layerpipe

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using namespace layerpipe;
  if (!absl::GetFlag(FLAGS_model).empty()) return Bench(absl::GetFlag(FLAGS_model), absl::GetFlag(FLAGS_model));
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_layers), ',', absl::SkipWhitespace())) {
    int layers = 0;
    if (!absl::SimpleAtoi(part, &layers) || layers <= 0) {
      std::fprintf(stderr, "--layers: bad count\n");
      return 2;
    }
    auto dir = TwelveBShapeCheckpoint(absl::GetFlag(FLAGS_workdir), layers);
    if (!dir.ok()) {
      std::fprintf(stderr, "%s\n", std::string(dir.status().message()).c_str());
      return 1;
    }
    if (int rc = Bench(*dir, "12B shapes, " + std::to_string(layers) + " layers (" + absl::GetFlag(FLAGS_precision) + ")");
        rc != 0)
      return rc;
  }
  return 0;
}
