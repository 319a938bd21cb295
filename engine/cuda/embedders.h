// The first stage's image and audio embedders on the device (MULTIMODAL.md, "Vision embedder" and
// "Audio"), LayerBackend's EmbedImage / EmbedAudio: pixels or samples up, soft-token rows back to the
// host rows that EmbedInputs hands to Forward, as Embed does. The GEMMs are the layers' (gemm.h) with
// the same precision rules as the CPU backend's Matmul: fp32 inputs in the fp32 mode, inputs rounded
// to bf16 in the bf16 mode. Never part of a decode graph, so its scratch may move freely.
#ifndef LAYERPIPE_ENGINE_CUDA_EMBEDDERS_H_
#define LAYERPIPE_ENGINE_CUDA_EMBEDDERS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_weights.h"
#include "engine/cuda/gemm.h"
#include "engine/model/config.h"
#include "engine/model/soft_tokens.h"

namespace layerpipe::cuda {

class DeviceEmbedders {
 public:
  // `bf16`: the bf16 precision mode.
  DeviceEmbedders(const ModelConfig& cfg, const DeviceWeights& dw, int device, bool bf16, Gemm* gemm,
                  cudaStream_t stream)
      : cfg_(cfg), dw_(dw), device_(device), bf16_(bf16), gemm_(gemm), stream_(stream) {}

  // [blocks][hidden] and [tokens][hidden] host rows into `out`.
  absl::Status EmbedImage(const ImageView& image, float* out);
  absl::Status EmbedAudio(const float* samples, int64_t tokens, float* out);

 private:
  // Copies `rows` fp32 rows of t_ to the host and waits for the stream.
  absl::Status Download(int64_t rows, float* out);

  const ModelConfig& cfg_;
  const DeviceWeights& dw_;
  int device_;
  bool bf16_;
  Gemm* gemm_;
  cudaStream_t stream_;
  DeviceBuffer in_;   // the pixels or samples
  DeviceBuffer x_;    // the first GEMM's input, in the activation precision
  DeviceBuffer t_;    // fp32 GEMM outputs
  DeviceBuffer act_;  // the projection's input (images)
};

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_EMBEDDERS_H_
