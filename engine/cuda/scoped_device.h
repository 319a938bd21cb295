// Makes a device current for a scope and restores the caller's afterwards. Destructors and link calls
// run on whatever thread lets go of an object, which may be working with another device.
#ifndef LAYERPIPE_ENGINE_CUDA_SCOPED_DEVICE_H_
#define LAYERPIPE_ENGINE_CUDA_SCOPED_DEVICE_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "engine/cuda/cuda_check.h"

namespace layerpipe::cuda {

class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    status_ = CudaStatus(cudaSetDevice(device), "cudaSetDevice");
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
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
