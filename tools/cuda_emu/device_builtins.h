// What a kernel file (.cu) needs to compile as host C++ and run on the CUDA emulator: the thread
// coordinates, barriers, warp shuffles and atomics, the device-only intrinsics the kernels use, and
// `lpemu::Launch`, which translate_cu.py puts where a file had `kernel<<<grid, block, smem, stream>>>(...)`.
// translate_cu.py includes this header first in every translated file.
//
// Threads of a block run as fibers on one host thread (block_exec.h): __syncthreads and the warp
// operations are real rendezvous points, so a barrier in divergent code, a shuffle that not every
// lane reaches, or an exchange through shared memory without a barrier between the write and the read
// shows up as a deadlock report or a wrong result instead of passing by luck.
#ifndef LAYERPIPE_TOOLS_CUDA_EMU_DEVICE_BUILTINS_H_
#define LAYERPIPE_TOOLS_CUDA_EMU_DEVICE_BUILTINS_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tools/cuda_emu/block_exec.h"

// Shared memory is per block; a block's threads all run on one host thread, and blocks run one after
// another on it, so a thread-local static is exactly one block's copy.
#undef __shared__
#define __shared__ static thread_local
#undef __launch_bounds__
#define __launch_bounds__(...)

using std::isfinite;
using std::isnan;

// The coordinates of the running emulated thread (block_exec.cc sets them at every switch).
#define threadIdx (::lpemu::CurrentThread().thread_idx)
#define blockIdx (::lpemu::CurrentThread().block_idx)
#define blockDim (::lpemu::CurrentThread().block_dim)
#define gridDim (::lpemu::CurrentThread().grid_dim)

inline void __syncthreads() { ::lpemu::BlockBarrier(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::lpemu::SyncWarp(mask); }

namespace lpemu {

template <typename T>
T ShuffleValue(unsigned mask, T v, Shuffle kind, int arg, int width, const char* what) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = WarpShuffle(mask, bits, kind, arg, width, what);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace lpemu

template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  return ::lpemu::ShuffleValue(mask, v, ::lpemu::Shuffle::kIndexed, src, width, "__shfl_sync");
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return ::lpemu::ShuffleValue(mask, v, ::lpemu::Shuffle::kXor, lane_mask, width, "__shfl_xor_sync");
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::lpemu::ShuffleValue(mask, v, ::lpemu::Shuffle::kDown, static_cast<int>(delta), width, "__shfl_down_sync");
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::lpemu::ShuffleValue(mask, v, ::lpemu::Shuffle::kUp, static_cast<int>(delta), width, "__shfl_up_sync");
}

// Atomics: several host threads may run blocks of one grid (block_exec.h), so these are real atomics.
template <typename T>
T atomicAdd(T* address, T v) {
  return std::atomic_ref<T>(*address).fetch_add(v);
}
inline double atomicAdd(double* address, double v) {
  std::atomic_ref<double> a(*address);
  double old = a.load();
  while (!a.compare_exchange_weak(old, old + v)) {
  }
  return old;
}
inline float atomicAdd(float* address, float v) {
  std::atomic_ref<float> a(*address);
  float old = a.load();
  while (!a.compare_exchange_weak(old, old + v)) {
  }
  return old;
}
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }

namespace lpemu {

// What translate_cu.py puts for a reinterpret_cast to a vector type (uint4, float4, ...): a GPU faults on
// a vector load or store that is not aligned to the vector's size, where x86 would not notice.
template <typename T, typename P>
T VectorCast(P* p) {
  using V = std::remove_cv_t<std::remove_pointer_t<T>>;
  if (reinterpret_cast<uintptr_t>(p) % alignof(V) != 0) KernelFault("a vector access to a misaligned address");
  return reinterpret_cast<T>(p);
}

}  // namespace lpemu

// CUDA's integer min / max, for any mix of integer widths (the usual arithmetic conversions).
template <typename A, typename B, typename = std::enable_if_t<std::is_integral_v<A> && std::is_integral_v<B>>>
auto min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(a) : static_cast<C>(b);
}
template <typename A, typename B, typename = std::enable_if_t<std::is_integral_v<A> && std::is_integral_v<B>>>
auto max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b) : static_cast<C>(a);
}

// cuda_runtime.h's typed overload, which it declares only for nvcc.
template <typename... P>
cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}

namespace lpemu {

// kernel<<<grid, block, smem, stream>>>(args...) becomes (translate_cu.py)
// Launch("kernel", grid, block, smem, stream)(fn, call, args...), where call(args...) calls the kernel
// and fn is its address when the launch needs it (dynamic shared memory beyond the default): the
// arguments are copied now, as a launch does, and converted to the kernel's parameters at the call.
class Launch {
 public:
  Launch(const char* name, dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = nullptr)
      : name_(name), grid_(grid), block_(block), smem_(smem), stream_(stream) {}

  template <typename Call, typename... A>
  void operator()(const void* fn, Call call, A&&... args) const {
    auto params = std::make_shared<std::tuple<std::decay_t<A>...>>(std::forward<A>(args)...);
    SubmitKernel(stream_, KernelLaunch{name_, fn, grid_, block_, smem_, [call, params] { std::apply(call, *params); }});
  }

 private:
  const char* name_;
  dim3 grid_, block_;
  size_t smem_;
  cudaStream_t stream_;
};

}  // namespace lpemu

#endif  // LAYERPIPE_TOOLS_CUDA_EMU_DEVICE_BUILTINS_H_
