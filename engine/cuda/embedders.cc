#include "engine/cuda/embedders.h"

#include "engine/cpu/embedders.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/kernels_embedders.h"

namespace layerpipe::cuda {

absl::Status DeviceEmbedders::EmbedImage(const ImageView& image, float* out) {
  const DeviceVision* v = dw_.vision();
  if (v == nullptr) return absl::FailedPreconditionError("this stage holds no vision embedder");
  LP_RETURN_IF_ERROR(CheckImageForEmbedder(cfg_, image));
  const int64_t bs = cfg_.vision.model_patch_size, P = cfg_.vision.patch_values(), H = cfg_.hidden_size;
  const int64_t gw = image.width / bs, n = gw * (image.height / bs);
  const size_t act = bf16_ ? 2 : 4, pixels = static_cast<size_t>(image.height * image.width * 3);
  LP_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  cudaGetLastError();  // as in a step: an earlier failure's error must not fail these launches
  bool moved = false;
  LP_RETURN_IF_ERROR(in_.EnsureAtLeast(pixels, &moved));
  LP_RETURN_IF_ERROR(x_.EnsureAtLeast(n * P * act, &moved));
  LP_RETURN_IF_ERROR(t_.EnsureAtLeast(n * H * sizeof(float), &moved));
  LP_RETURN_IF_ERROR(act_.EnsureAtLeast(n * H * act, &moved));
  LP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(in_.get(), image.rgb, pixels, cudaMemcpyHostToDevice, stream_));
  PatchNormParams patches{};
  patches.rgb = in_.as<uint8_t>();
  patches.block = bs;
  patches.grid_w = gw;
  patches.blocks = n;
  patches.weight = v->patch_ln1_weight;
  patches.bias = v->patch_ln1_bias;
  patches.eps = cfg_.vision.layer_norm_eps;
  patches.out = x_.get();
  patches.out_bf16 = bf16_;
  LP_CUDA_RETURN_IF_ERROR(LaunchPatchNorm(patches, stream_));
  LP_RETURN_IF_ERROR(gemm_->Run(x_.get(), v->patch_dense.data.get(), bf16_, n, H, P, t_.as<float>(), stream_));
  VisionRowsParams rows{};
  rows.t = t_.as<float>();
  rows.rows = n;
  rows.hidden = H;
  rows.grid_w = gw;
  rows.dense_bias = v->patch_dense_bias;
  rows.ln2_weight = v->patch_ln2_weight;
  rows.ln2_bias = v->patch_ln2_bias;
  rows.pos_embedding = v->pos_embedding;
  rows.pos_norm_weight = v->pos_norm_weight;
  rows.pos_norm_bias = v->pos_norm_bias;
  rows.ln_eps = cfg_.vision.layer_norm_eps;
  rows.rms_eps = cfg_.vision.rms_norm_eps;
  rows.out = act_.get();
  rows.out_bf16 = bf16_;
  LP_CUDA_RETURN_IF_ERROR(LaunchVisionRows(rows, stream_));
  LP_RETURN_IF_ERROR(gemm_->Run(act_.get(), v->projection.data.get(), bf16_, n, H, H, t_.as<float>(), stream_));
  return Download(n, out);
}

absl::Status DeviceEmbedders::EmbedAudio(const float* samples, int64_t tokens, float* out) {
  const DeviceMatrix& w = dw_.audio_projection();
  if (w.rows == 0) return absl::FailedPreconditionError("this stage holds no audio projection");
  if (samples == nullptr || tokens <= 0) return absl::InvalidArgumentError("no audio frames to embed");
  const int64_t S = cfg_.audio.samples_per_token, H = cfg_.hidden_size;
  LP_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  cudaGetLastError();
  bool moved = false;
  LP_RETURN_IF_ERROR(in_.EnsureAtLeast(tokens * S * sizeof(float), &moved));
  LP_RETURN_IF_ERROR(x_.EnsureAtLeast(tokens * S * (bf16_ ? 2 : 4), &moved));
  LP_RETURN_IF_ERROR(t_.EnsureAtLeast(tokens * H * sizeof(float), &moved));
  LP_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(in_.get(), samples, tokens * S * sizeof(float), cudaMemcpyHostToDevice, stream_));
  // Each frame's weightless RmsNorm, exactly the text stack's row norm.
  LP_CUDA_RETURN_IF_ERROR(
      LaunchRmsNorm(in_.as<float>(), nullptr, tokens, S, cfg_.audio.rms_norm_eps, x_.get(), bf16_, stream_));
  LP_RETURN_IF_ERROR(gemm_->Run(x_.get(), w.data.get(), bf16_, tokens, H, S, t_.as<float>(), stream_));
  return Download(tokens, out);
}

absl::Status DeviceEmbedders::Download(int64_t rows, float* out) {
  LP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out, t_.get(), rows * cfg_.hidden_size * sizeof(float),
                                          cudaMemcpyDeviceToHost, stream_));
  LP_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

}  // namespace layerpipe::cuda
