// Owned CUDA allocations: device memory (cudaMalloc / cudaFree), movable, never copied; and pinned
// host memory (cudaMallocHost / cudaFreeHost) that only grows, for what is staged between host and
// device: copies from it are truly asynchronous, which is why its users drain their stream before
// they rewrite it.
#ifndef LAYERPIPE_ENGINE_CUDA_DEVICE_BUFFER_H_
#define LAYERPIPE_ENGINE_CUDA_DEVICE_BUFFER_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "engine/cuda/cuda_check.h"

namespace layerpipe::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { Release(); }

  // Replaces the allocation with a fresh one of `bytes` (contents undefined).
  absl::Status Allocate(size_t bytes) {
    Release();
    if (bytes == 0) return absl::OkStatus();
    void* p = nullptr;
    LP_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
    ptr_ = p;
    bytes_ = bytes;
    return absl::OkStatus();
  }
  // Grows to at least `bytes`; returns true in *moved when the address changed.
  absl::Status EnsureAtLeast(size_t bytes, bool* moved) {
    if (bytes <= bytes_) return absl::OkStatus();
    *moved = true;
    return Allocate(bytes);
  }

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void Release() {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
  }

  // Grows to at least `bytes`; contents are undefined after growing.
  absl::Status EnsureAtLeast(size_t bytes) {
    if (bytes <= bytes_) return absl::OkStatus();
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
    LP_CUDA_RETURN_IF_ERROR(cudaMallocHost(&ptr_, bytes));
    bytes_ = bytes;
    return absl::OkStatus();
  }
  uint8_t* get() const { return static_cast<uint8_t*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_DEVICE_BUFFER_H_
