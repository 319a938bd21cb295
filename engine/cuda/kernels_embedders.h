// Launchers of the first stage's image embedder kernels (kernels_embedders.cu): the per-block work
// around the vision embedder's two GEMMs (MULTIMODAL.md, "Vision embedder"). The audio frames need only
// a weightless RmsNorm (kernels.h). Same conventions as kernels.h: launchers only enqueue, and GEMM
// inputs are written fp32 or, in the bf16 mode, rounded to bf16.
#ifndef LAYERPIPE_ENGINE_CUDA_KERNELS_EMBEDDERS_H_
#define LAYERPIPE_ENGINE_CUDA_KERNELS_EMBEDDERS_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace layerpipe::cuda {

// out[blk] = LayerNorm(pixels of block blk / 255; weight, bias, eps): blocks of `block` x `block` RGB
// pixels of a uint8 [height][grid_w · block][3] image in raster order, each flattened (row, column,
// channel); out is [blocks][block · block · 3]. Statistics in double over two passes, as the CPU does.
struct PatchNormParams {
  const uint8_t* rgb;
  int64_t block, grid_w, blocks;
  const float* weight;
  const float* bias;
  double eps;
  void* out;
  bool out_bf16;
};
cudaError_t LaunchPatchNorm(const PatchNormParams& p, cudaStream_t stream);

// Per block row r of t ([blocks][hidden], the patch_dense GEMM's output), in place up to the output:
// t = LayerNorm(t + dense_bias; ln2) + pos[column, 0] + pos[row, 1]; t = LayerNorm(t; pos_norm);
// out[r] = t / rms(t) (no weight), the projection GEMM's input.
struct VisionRowsParams {
  float* t;
  int64_t rows, hidden, grid_w;
  const float* dense_bias;
  const float* ln2_weight;
  const float* ln2_bias;
  const float* pos_embedding;  // [posemb][2][hidden]
  const float* pos_norm_weight;
  const float* pos_norm_bias;
  double ln_eps, rms_eps;
  void* out;
  bool out_bf16;
};
cudaError_t LaunchVisionRows(const VisionRowsParams& p, cudaStream_t stream);

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_KERNELS_EMBEDDERS_H_
