// The image and audio embedders of the stage that embeds (MULTIMODAL.md): prepared pixels or audio
// frames in, soft-token rows of the text stack's width out.
#ifndef LAYERPIPE_ENGINE_CPU_EMBEDDERS_H_
#define LAYERPIPE_ENGINE_CPU_EMBEDDERS_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "engine/model/soft_tokens.h"
#include "engine/cpu/thread_pool.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"

namespace layerpipe {

// y[m][w.rows] = x[m][w.cols] · wᵀ, with the backend's precision rules.
using MatmulFn = std::function<void(const float* x, int64_t m, const WeightMatrix& w, float* y)>;

// PyTorch LayerNorm of one row: (x − mean) / sqrt(var + eps) · w + b, statistics in double over two
// passes (near-constant patches of real images lose the variance to a one-pass fp32 sum).
void LayerNorm(const float* x, const float* w, const float* b, int64_t n, double eps, float* out);

// InvalidArgument unless `image` is a whole number of vision blocks within the embedder's block positions
// (every backend's EmbedImage checks this first).
absl::Status CheckImageForEmbedder(const ModelConfig& c, const ImageView& image);

// The vision embedder on one image: [blocks][hidden] into `out`, blocks in raster order.
absl::Status EmbedImageCpu(const VisionWeights& w, const ModelConfig& c, const ImageView& image, ThreadPool& pool,
                           const MatmulFn& matmul, float* out);

// The audio projection of `tokens` frames: [tokens][hidden] into `out`.
absl::Status EmbedAudioCpu(const WeightMatrix& projection, const ModelConfig& c, const float* samples, int64_t tokens,
                           ThreadPool& pool, const MatmulFn& matmul, float* out);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CPU_EMBEDDERS_H_
