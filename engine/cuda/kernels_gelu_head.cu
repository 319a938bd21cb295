// Elementwise kernels: gated GELU-tanh, the head's softcap, the embedding gather and bf16 widening.
#include <cuda_bf16.h>

#include "engine/cuda/device_common.cuh"
#include "engine/cuda/kernels.h"

namespace layerpipe::cuda {
namespace {

constexpr int kThreads = 256;

unsigned BlocksFor(int64_t n) { return GridFor(n, kThreads); }

__global__ void GeluMulKernel(const float* gu, int64_t rows, int64_t inter, void* out, bool out_bf16) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  const int64_t total = rows * inter;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / inter, i = e % inter;
    const float x = gu[r * 2 * inter + i];
    const float u = gu[r * 2 * inter + inter + i];
    StoreAct(out, e, 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x))) * u, out_bf16);
  }
}

__global__ void SoftcapKernel(float* x, int64_t n, float cap) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    x[e] = cap * tanhf(x[e] / cap);
  }
}

template <typename T>
__global__ void EmbedKernel(const T* table, const int32_t* ids, int64_t rows, int64_t hidden, float scale, float* out) {
  const int64_t total = rows * hidden;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / hidden, i = e % hidden;
    out[e] = ToFloat(table[int64_t(ids[r]) * hidden + i]) * scale;
  }
}

__global__ void Bf16ToF32Kernel(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    dst[e] = __uint_as_float(static_cast<uint32_t>(src[e]) << 16);
  }
}

}  // namespace

cudaError_t LaunchGeluMul(const float* gu, int64_t rows, int64_t inter, void* out, bool out_bf16,
                          cudaStream_t stream) {
  if (rows * inter <= 0) return cudaSuccess;
  GeluMulKernel<<<BlocksFor(rows * inter), kThreads, 0, stream>>>(gu, rows, inter, out, out_bf16);
  return cudaGetLastError();
}

cudaError_t LaunchSoftcap(float* x, int64_t n, float cap, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  SoftcapKernel<<<BlocksFor(n), kThreads, 0, stream>>>(x, n, cap);
  return cudaGetLastError();
}

cudaError_t LaunchEmbed(const void* table, bool table_bf16, const int32_t* ids, int64_t rows, int64_t hidden,
                        float scale, float* out, cudaStream_t stream) {
  if (rows * hidden <= 0) return cudaSuccess;
  if (table_bf16) {
    EmbedKernel<<<BlocksFor(rows * hidden), kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(table), ids, rows,
                                                                   hidden, scale, out);
  } else {
    EmbedKernel<<<BlocksFor(rows * hidden), kThreads, 0, stream>>>(static_cast<const float*>(table), ids, rows, hidden,
                                                                   scale, out);
  }
  return cudaGetLastError();
}

cudaError_t LaunchBf16ToF32(const uint16_t* src, float* dst, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  Bf16ToF32Kernel<<<BlocksFor(n), kThreads, 0, stream>>>(src, dst, n);
  return cudaGetLastError();
}

}  // namespace layerpipe::cuda
