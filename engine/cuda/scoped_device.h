// Makes a device current for a scope and restores the caller's afterwards. Destructors and link calls
// run on whatever thread lets go of an object, which may be working with another device.
#ifndef LAYERPIPE_ENGINE_CUDA_SCOPED_DEVICE_H_
#define LAYERPIPE_ENGINE_CUDA_SCOPED_DEVICE_H_

#include <cuda.h>  // types only: the driver call is looked up through the runtime (ThreadHasContext)
#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "engine/cuda/cuda_check.h"

namespace layerpipe::cuda {

// A driver entry point found through the runtime; nullptr where the driver lacks it.
template <typename Fn>
Fn DriverEntryPoint(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

// Whether a context is current to the calling thread. cudaGetDevice answers 0 on a thread that never
// chose a device, and since CUDA 12 cudaSetDevice creates the device's primary context at once, so
// "restoring" device 0 on a gRPC or link thread would put a context (hundreds of MiB) on a GPU this
// process never uses — another worker's. The runtime has no such query; cuCtxGetCurrent is found
// through it so that the plugin keeps no link-time dependency on the driver library.
inline bool ThreadHasContext() {
  using GetCurrent = CUresult (*)(CUcontext*);
  static const GetCurrent get_current = DriverEntryPoint<GetCurrent>("cuCtxGetCurrent");
  if (get_current == nullptr) return true;  // cannot tell: restore, as a caller would expect
  CUcontext ctx = nullptr;
  return get_current(&ctx) == CUDA_SUCCESS && ctx != nullptr;
}

class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (!ThreadHasContext() || cudaGetDevice(&previous_) != cudaSuccess || previous_ == device) previous_ = -1;
    status_ = CudaStatus(cudaSetDevice(device), "cudaSetDevice");
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  // A thread that had no device keeps this one: there is nothing to go back to.
  ~ScopedDevice() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  // Whether the device could be made current.
  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  absl::Status status_;
};

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_SCOPED_DEVICE_H_
