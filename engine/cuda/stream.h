// A non-blocking CUDA stream with shared ownership. Device rows free their memory in stream order on
// the stream that produced them (device_rows.h), so they keep that stream alive after its first owner
// (a backend, a peer link) has gone.
#ifndef LAYERPIPE_ENGINE_CUDA_STREAM_H_
#define LAYERPIPE_ENGINE_CUDA_STREAM_H_

#include <cuda_runtime.h>

#include <memory>

#include "absl/status/statusor.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/scoped_device.h"

namespace layerpipe::cuda {

class Stream {
 public:
  static absl::StatusOr<std::shared_ptr<Stream>> Create(int device) {
    ScopedDevice on(device);
    LP_RETURN_IF_ERROR(on.status());
    cudaStream_t s = nullptr;
    LP_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return std::shared_ptr<Stream>(new Stream(device, s));
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  // Work still queued finishes first: cudaStreamDestroy releases the stream once it is idle.
  ~Stream() {
    ScopedDevice on(device_);
    cudaStreamDestroy(stream_);
  }

  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }

 private:
  Stream(int device, cudaStream_t s) : device_(device), stream_(s) {}
  int device_;
  cudaStream_t stream_;
};

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_STREAM_H_
