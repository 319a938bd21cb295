// What images cost on the CPU engine, on a generated checkpoint of the real 12B shapes: the vision
// embedder on one prepared image (768x768 = 256 soft tokens by default), the audio projection, and the
// time to first token of an image prompt against a text prompt of the same length (an image should cost
// no more than its tokens). With --image FILE the file's decoding and resize are timed too.
//
//   bench_vision --layers 2 --workdir /tmp/layerpipe_bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/bench_checkpoint.h"
#include "engine/engine.h"
#include "engine/media/image.h"
#include "engine/media/media_limits.h"

ABSL_FLAG(int, layers, 2, "decoder layers of the generated 12B-shaped checkpoint");
ABSL_FLAG(std::string, workdir, "/tmp/layerpipe_bench", "where generated checkpoints are kept (reused)");
ABSL_FLAG(std::string, model, "", "benchmark this checkpoint instead of a generated one");
ABSL_FLAG(std::string, image, "", "a PNG or JPEG to decode and prepare (default: random 768x768 pixels)");
ABSL_FLAG(int, repeats, 5, "runs of each measurement (the median is printed)");
ABSL_FLAG(std::string, precision, "bf16", "bf16 or fp32");
ABSL_FLAG(int, threads, 0, "threads (0: all cores)");

namespace layerpipe {
namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double MedianMs(int repeats, F&& f) {
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const Clock::time_point t0 = Clock::now();
    if (!f()) return -1;
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int Run(const std::string& dir) {
  EngineOptions o;
  if (!ParsePrecision(absl::GetFlag(FLAGS_precision), &o.precision)) {
    std::fprintf(stderr, "--precision must be bf16 or fp32\n");
    return 2;
  }
  o.threads = absl::GetFlag(FLAGS_threads);
  auto engine = Engine::Load(dir, o);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", std::string(engine.status().message()).c_str());
    return 1;
  }
  Engine& e = **engine;
  const ModelConfig& c = e.config();
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  RgbImage image;
  if (const std::string path = absl::GetFlag(FLAGS_image); !path.empty()) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string bytes = ss.str();
    MediaLimits limits;
    const double ms = MedianMs(repeats, [&] {
      auto prepared = PrepareImage(bytes, limits);
      if (!prepared.ok()) std::fprintf(stderr, "%s: %s\n", path.c_str(), std::string(prepared.status().message()).c_str());
      if (prepared.ok()) image = *std::move(prepared);
      return prepared.ok();
    });
    if (ms < 0) return 1;
    std::printf("decode + prepare %s -> %lldx%lld: %.1f ms\n", path.c_str(), static_cast<long long>(image.width),
                static_cast<long long>(image.height), ms);
  } else {
    image.width = image.height = 768;
    image.rgb.resize(768 * 768 * 3);
    std::mt19937 rng(3);
    for (uint8_t& v : image.rgb) v = static_cast<uint8_t>(rng());
  }
  const int64_t b = c.vision.model_patch_size, n = (image.height / b) * (image.width / b), H = c.hidden_size;
  const ImageView view{image.height, image.width, image.rgb.data()};
  std::vector<float> rows(static_cast<size_t>(n * H));
  const double embed_ms = MedianMs(repeats, [&] { return e.executor().EmbedImage(view, rows.data()).ok(); });
  if (embed_ms < 0) {
    std::fprintf(stderr, "the checkpoint has no vision embedder\n");
    return 1;
  }
  std::printf("vision embedder, %lld soft tokens (hidden %lld, %s): %.1f ms (%.2f ms per token)\n",
              static_cast<long long>(n), static_cast<long long>(H), PrecisionName(o.precision), embed_ms, embed_ms / n);
  std::vector<float> samples(static_cast<size_t>(750 * c.audio.samples_per_token), 0.1f);
  std::vector<float> audio_rows(static_cast<size_t>(750 * H));
  const double audio_ms = MedianMs(repeats, [&] { return e.executor().EmbedAudio(samples.data(), 750, audio_rows.data()).ok(); });
  if (audio_ms >= 0) std::printf("audio projection, 750 frames (30 s): %.1f ms\n", audio_ms);

  // Time to first token: <bos> text <boi> image×n <eoi> text, and the same length of text alone.
  std::vector<int32_t> image_prompt = {c.bos_token_id, 818, 5279, c.mm_ids.boi};
  const int64_t first = static_cast<int64_t>(image_prompt.size());
  image_prompt.insert(image_prompt.end(), static_cast<size_t>(n), c.mm_ids.image);
  image_prompt.insert(image_prompt.end(), {c.mm_ids.eoi, 563, 1037});
  std::vector<int32_t> text_prompt(image_prompt.size());
  std::mt19937 rng(5);
  for (int32_t& id : text_prompt) id = 3 + static_cast<int32_t>(rng() % 200000);
  text_prompt[0] = c.bos_token_id;
  SoftSpan span;
  span.offset = first;
  span.count = n;
  span.image = view;
  auto ttft = [&](const std::vector<int32_t>& ids, absl::Span<const SoftSpan> soft) {
    return MedianMs(repeats, [&] {
      auto kv = e.NewSequence();
      StepInput in{kv.get(), ids, soft};
      return e.LastHidden({&in, 1}).ok();
    });
  };
  const double with_image = ttft(image_prompt, {&span, 1}), text_only = ttft(text_prompt, {});
  std::printf("prefill of %zu tokens, %d layers: image prompt %.1f ms, text prompt %.1f ms (ratio %.2f)\n",
              image_prompt.size(), c.num_layers, with_image, text_only, with_image / text_only);
  return 0;
}

}  // namespace
}  // namespace layerpipe

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::string dir = absl::GetFlag(FLAGS_model);
  if (dir.empty()) {
    auto made = layerpipe::TwelveBShapeCheckpoint(absl::GetFlag(FLAGS_workdir) + "/mm", absl::GetFlag(FLAGS_layers));
    if (!made.ok()) {
      std::fprintf(stderr, "%s\n", std::string(made.status().message()).c_str());
      return 1;
    }
    dir = *made;
  }
  return layerpipe::Run(dir);
}
