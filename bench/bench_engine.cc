// Prefill and decode speed of the CPU engine on generated checkpoints of the real 12B layer shapes
// (full 262,144 vocabulary), with the weight bytes a decode step reads and the bandwidth that implies,
// and the share of the time spent in attention.
//
//   bench_engine --layers 6,12 --workdir /tmp/layerpipe_bench
//   bench_engine --layers 6 --prompt_tokens 4096                          long prefill (in 512-token chunks)
//   bench_engine --layers 6 --prompt_tokens 4096 --prefill_chunk 0       the same as one step
//   bench_engine --layers 6 --prompt_tokens 0 --context 32768              decode at a depth
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
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_checkpoint.h"
#include "tools/checkpoint/checkpoint_writer.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/model/quantize.h"

ABSL_FLAG(std::string, layers, "6,12", "layer counts of the generated 12B-shaped checkpoints");
ABSL_FLAG(std::string, workdir, "/tmp/layerpipe_bench", "where generated checkpoints are kept (reused)");
ABSL_FLAG(std::string, model, "", "benchmark this checkpoint instead of generated ones");
ABSL_FLAG(int, prompt_tokens, 256, "prefill length measured (0: none)");
ABSL_FLAG(int, prefill_chunk, static_cast<int>(layerpipe::EngineOptions().prefill_chunk),
          "tokens per prefill step, as the engine takes them by default (0: the whole prompt in one step)");
ABSL_FLAG(int, context, -1,
          "decode after a context of this many tokens (-1: after the measured prompt); a context other than "
          "the prompt is prefilled untimed first");
ABSL_FLAG(int, decode_tokens, 16, "decode steps measured");
ABSL_FLAG(int, batch, 1, "sequences decoded together");
ABSL_FLAG(std::string, precision, "bf16", "bf16 or fp32");
ABSL_FLAG(std::string, quantize, "none", "none, int8 or int4: quantize the decoder matrices at load");
ABSL_FLAG(std::string, quantize_head, "none", "none or int8: quantize the embedding / tied head at load");
ABSL_FLAG(int, threads, 0, "threads (0: all cores)");
ABSL_FLAG(bool, huge_pages, true,
          "weights copied into huge pages at load, tiled where the bf16 kernel reads them so (false: read in place "
          "from the mapping)");

namespace layerpipe {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::vector<int32_t> RandomPrompt(int n, int32_t vocab, std::mt19937& rng) {
  std::vector<int32_t> p = {2};
  while (static_cast<int>(p.size()) < n) p.push_back(3 + static_cast<int32_t>(rng() % (vocab - 3)));
  p.resize(n);
  return p;
}

// Wall time and the parts of it spent in attention and in the layers' matmuls.
struct Timed {
  double seconds = 0, attention = 0, matmul = 0;
  template <typename Fn>
  bool Run(Fn&& fn) {
    const int64_t a0 = CpuBackend::attention_nanos(), m0 = CpuBackend::matmul_nanos();
    const auto t0 = Clock::now();
    const bool ok = fn();
    seconds += Seconds(t0, Clock::now());
    attention += 1e-9 * double(CpuBackend::attention_nanos() - a0);
    matmul += 1e-9 * double(CpuBackend::matmul_nanos() - m0);
    return ok;
  }
  std::string Shares() const {
    if (seconds <= 0) return "-";
    return absl::StrFormat("attention %.1f%% matmul %.1f%%", 100 * attention / seconds, 100 * matmul / seconds);
  }
};

int Bench(const std::string& dir, const std::string& label) {
  EngineOptions o;
  if (!ParsePrecision(absl::GetFlag(FLAGS_precision), &o.precision)) {
    std::fprintf(stderr, "--precision must be bf16 or fp32\n");
    return 2;
  }
  const int n = absl::GetFlag(FLAGS_prompt_tokens), steps = absl::GetFlag(FLAGS_decode_tokens);
  const int context = absl::GetFlag(FLAGS_context) < 0 ? n : absl::GetFlag(FLAGS_context);
  const int chunk = absl::GetFlag(FLAGS_prefill_chunk);
  if (n < 0 || steps < 0 || chunk < 0) {
    std::fprintf(stderr, "--prompt_tokens, --decode_tokens and --prefill_chunk must be >= 0\n");
    return 2;
  }
  auto quantize = ParseQuantization(absl::GetFlag(FLAGS_quantize));
  if (!quantize.ok()) {
    std::fprintf(stderr, "%s\n", std::string(quantize.status().message()).c_str());
    return 2;
  }
  o.quantize = *quantize;
  auto quantize_head = ParseHeadQuantization(absl::GetFlag(FLAGS_quantize_head));
  if (!quantize_head.ok()) {
    std::fprintf(stderr, "%s\n", std::string(quantize_head.status().message()).c_str());
    return 2;
  }
  o.quantize_head = *quantize_head;
  o.threads = absl::GetFlag(FLAGS_threads);
  o.prefill_chunk = chunk > 0 ? chunk : std::max({n, context, 1});
  o.huge_pages = absl::GetFlag(FLAGS_huge_pages);
  const auto load_start = Clock::now();
  auto engine = Engine::Load(dir, o);
  const double load_s = Seconds(load_start, Clock::now());
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", std::string(engine.status().message()).c_str());
    return 1;
  }
  Engine& e = **engine;
  const ModelConfig& c = e.config();
  std::mt19937 rng(1);
  const int batch = std::max(1, absl::GetFlag(FLAGS_batch));
  std::vector<std::vector<int32_t>> prompts(batch), contexts(batch);
  for (auto& p : prompts) p = RandomPrompt(n, c.vocab_size, rng);
  for (auto& p : contexts) p = RandomPrompt(context, c.vocab_size, rng);
  // Warm the page cache and the thread pool so the numbers measure compute, not first-touch I/O.
  {
    auto kv = e.NewSequence();
    std::vector<int32_t> warm = RandomPrompt(8, c.vocab_size, rng);
    StepInput in{kv.get(), warm};
    if (auto r = e.Step({&in, 1}); !r.ok()) return 1;
  }
  auto step = [&](absl::Span<StepInput> in) {
    auto r = e.Step(in);
    if (!r.ok()) std::fprintf(stderr, "%s\n", std::string(r.status().message()).c_str());
    return r.ok();
  };
  std::vector<std::unique_ptr<SequenceState>> kvs;
  Timed prefill;
  for (auto& p : prompts) {
    kvs.push_back(e.NewSequence());
    StepInput in{kvs.back().get(), p};
    if (n > 0 && !prefill.Run([&] { return step({&in, 1}); })) return 1;
  }
  if (context != n) {  // decode at another depth: a fresh context, prefilled untimed
    for (int b = 0; b < batch; ++b) {
      kvs[b] = e.NewSequence();
      StepInput in{kvs[b].get(), contexts[b]};
      if (context > 0 && !step({&in, 1})) return 1;
    }
  }
  std::vector<int32_t> next(batch, 5);
  std::vector<StepInput> decode;
  for (int b = 0; b < batch; ++b) decode.push_back({kvs[b].get(), absl::MakeConstSpan(&next[b], 1)});
  // One untimed step first, as llama-bench warms up: a fresh sequence's first step also allocates its
  // KV ring and the kernels' scratch.
  if (steps > 0 && !step(absl::MakeSpan(decode))) return 1;
  Timed dec;
  for (int s = 0; s < steps; ++s) {
    if (!dec.Run([&] { return step(absl::MakeSpan(decode)); })) return 1;
  }

  double layer_bytes = 0;
  for (int l = 0; l < c.num_layers; ++l) layer_bytes += static_cast<double>(e.weights().LayerMatrixBytes(l));
  const double head_bytes = static_cast<double>(e.weights().embed_tokens().bytes());
  const double step_bytes = layer_bytes + head_bytes;
  // 2 flops per weight per token for the layer matmuls, whatever their format; the head runs once per
  // prompt, and so does the last layer past its keys and values (SequenceSlice::outputs).
  auto flops = [](std::initializer_list<const WeightMatrix*> ms) {
    double f = 0;
    for (const WeightMatrix* m : ms) f += 2.0 * static_cast<double>(m->rows) * static_cast<double>(m->cols);
    return f;
  };
  auto layer_flops = [&](const LayerWeights& L) {
    return flops({&L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj, &L.gate_proj, &L.up_proj, &L.down_proj});
  };
  double layers_flops = 0;
  for (int l = 0; l < c.num_layers; ++l) layers_flops += layer_flops(e.weights().layer(l));
  const LayerWeights& last = e.weights().layer(c.num_layers - 1);
  const double last_rest_flops = layer_flops(last) - flops({&last.k_proj, &last.v_proj});
  const double head_flops = flops({&e.weights().embed_tokens()});
  const double prefill_flops = (layers_flops - last_rest_flops) * n * batch + (last_rest_flops + head_flops) * batch;
  std::printf("%-28s load %.1f s (%s) | prefill %6d tok (chunk %d): %8.1f tok/s  %6.1f GFLOP/s  %s"
              " | decode batch %d at %d: %7.2f tok/s  %6.2f ms/step  %s  weights %.2f GB/step"
              "  %5.1f GB/s\n",
              label.c_str(), load_s, o.huge_pages ? "huge pages" : "mmap", n, static_cast<int>(o.prefill_chunk), n > 0 ? n * batch / prefill.seconds : 0.0,
              n > 0 ? prefill_flops / prefill.seconds / 1e9 : 0.0, prefill.Shares().c_str(), batch, context,
              steps > 0 ? steps * batch / dec.seconds : 0.0, steps > 0 ? 1e3 * dec.seconds / steps : 0.0,
              dec.Shares().c_str(),
              step_bytes / 1e9, steps > 0 ? step_bytes * steps / dec.seconds / 1e9 : 0.0);
  std::fflush(stdout);
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
    if (int rc = Bench(*dir, "12B shapes, " + std::to_string(layers) + " layers (" + absl::GetFlag(FLAGS_precision) + (absl::GetFlag(FLAGS_quantize) == "none" ? "" : ", " + absl::GetFlag(FLAGS_quantize)) + (absl::GetFlag(FLAGS_quantize_head) == "none" ? "" : ", head " + absl::GetFlag(FLAGS_quantize_head)) + ")");
        rc != 0)
      return rc;
  }
  return 0;
}
