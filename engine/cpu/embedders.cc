#include "engine/cpu/embedders.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cpu/ops.h"

namespace layerpipe {

void LayerNorm(const float* x, const float* w, const float* b, int64_t n, double eps, float* out) {
  double mean = 0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= static_cast<double>(n);
  double var = 0;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= static_cast<double>(n);
  const double inv = 1.0 / std::sqrt(var + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>((x[i] - mean) * inv * w[i] + b[i]);
}

absl::Status CheckImageForEmbedder(const ModelConfig& c, const ImageView& image) {
  const int64_t bs = c.vision.model_patch_size;
  const int64_t gw = image.width / bs, gh = image.height / bs;
  if (image.rgb == nullptr || gw * gh <= 0 || gw * bs != image.width || gh * bs != image.height) {
    return absl::InvalidArgumentError(absl::StrCat("an image of ", image.width, "x", image.height,
                                                   " pixels is not a whole number of ", bs, "-pixel blocks"));
  }
  if (gw > c.vision.posemb_size || gh > c.vision.posemb_size) {
    return absl::InvalidArgumentError(absl::StrCat("an image of ", gw, "x", gh, " blocks exceeds the ",
                                                   c.vision.posemb_size, " block positions of the vision embedder"));
  }
  return absl::OkStatus();
}

absl::Status EmbedImageCpu(const VisionWeights& w, const ModelConfig& c, const ImageView& image, ThreadPool& pool,
                           const MatmulFn& matmul, float* out) {
  if (absl::Status st = CheckImageForEmbedder(c, image); !st.ok()) return st;
  const int64_t bs = c.vision.model_patch_size, P = c.vision.patch_values(), H = c.hidden_size;
  const int64_t gw = image.width / bs, gh = image.height / bs, n = gw * gh;
  const double ln_eps = c.vision.layer_norm_eps;
  // Block (X, Y) flattened (row, column, channel), channel fastest; pixels scaled to [0, 1] and kept fp32.
  std::vector<float> patches(static_cast<size_t>(n * P)), t(static_cast<size_t>(n * H));
  pool.ParallelFor(n, [&](int64_t begin, int64_t end) {
    std::vector<float> raw(static_cast<size_t>(P));
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t X = blk % gw, Y = blk / gw;
      for (int64_t r = 0; r < bs; ++r) {
        const uint8_t* src = image.rgb + ((Y * bs + r) * image.width + X * bs) * 3;
        for (int64_t i = 0; i < bs * 3; ++i) raw[r * bs * 3 + i] = static_cast<float>(src[i]) / 255.0f;
      }
      LayerNorm(raw.data(), w.patch_ln1_weight.data(), w.patch_ln1_bias.data(), P, ln_eps, patches.data() + blk * P);
    }
  });
  matmul(patches.data(), n, w.patch_dense, t.data());
  pool.ParallelFor(n, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(H));
    for (int64_t blk = begin; blk < end; ++blk) {
      float* x = t.data() + blk * H;
      for (int64_t i = 0; i < H; ++i) x[i] += w.patch_dense_bias[i];
      LayerNorm(x, w.patch_ln2_weight.data(), w.patch_ln2_bias.data(), H, ln_eps, row.data());
      // pos_embedding is [position][axis][hidden]: axis 0 takes the block's column, axis 1 its row.
      const float* px = w.pos_embedding.data() + ((blk % gw) * 2 + 0) * H;
      const float* py = w.pos_embedding.data() + ((blk / gw) * 2 + 1) * H;
      for (int64_t i = 0; i < H; ++i) row[i] += px[i] + py[i];
      LayerNorm(row.data(), w.pos_norm_weight.data(), w.pos_norm_bias.data(), H, ln_eps, x);
      RmsNorm(x, nullptr, H, c.vision.rms_norm_eps, x);
    }
  });
  matmul(t.data(), n, w.projection, out);
  return absl::OkStatus();
}

absl::Status EmbedAudioCpu(const WeightMatrix& projection, const ModelConfig& c, const float* samples, int64_t tokens,
                           ThreadPool& pool, const MatmulFn& matmul, float* out) {
  const int64_t S = c.audio.samples_per_token;
  if (samples == nullptr || tokens <= 0) return absl::InvalidArgumentError("no audio frames to embed");
  std::vector<float> frames(static_cast<size_t>(tokens * S));
  pool.ParallelFor(tokens, [&](int64_t begin, int64_t end) {
    for (int64_t f = begin; f < end; ++f) RmsNorm(samples + f * S, nullptr, S, c.audio.rms_norm_eps, frames.data() + f * S);
  });
  matmul(frames.data(), tokens, projection, out);
  return absl::OkStatus();
}

}  // namespace layerpipe
