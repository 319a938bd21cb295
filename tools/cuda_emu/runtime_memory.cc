// The runtime's memory calls: device, pinned and stream-ordered allocations, pools, copies checked
// against the allocations their direction names, and IPC memory handles (a cudaMalloc allocation's
// memfd, which another process maps).
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "tools/cuda_emu/runtime_state.h"

namespace lpemu {
namespace {

// Checks a copy's pointers against its direction.
cudaError_t CheckCopy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  bool ok = false;
  switch (kind) {
    case cudaMemcpyHostToDevice: ok = IsDevice(dst, bytes) && !IsDevice(src, 1); break;
    case cudaMemcpyDeviceToHost: ok = IsDevice(src, bytes) && !IsDevice(dst, 1); break;
    case cudaMemcpyDeviceToDevice: ok = IsDevice(dst, bytes) && IsDevice(src, bytes); break;
    case cudaMemcpyHostToHost: ok = !IsDevice(dst, 1) && !IsDevice(src, 1); break;
    case cudaMemcpyDefault: ok = true; break;
  }
  if (!ok) {
    std::fprintf(stderr, "CUDA emulator: cudaMemcpy of %zu bytes %p <- %p does not fit its kind %d\n", bytes, dst, src,
                 static_cast<int>(kind));
  }
  return ok ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace
}  // namespace lpemu

using namespace lpemu;  // NOLINT: the definitions below are the runtime's C API

extern "C" {

cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (RefusedByCapture()) return cudaErrorStreamCaptureUnsupported;
  *p = Allocate(bytes, Memory::kDevice);
  return *p == nullptr ? Fail(cudaErrorMemoryAllocation) : cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (RefusedByCapture()) return cudaErrorStreamCaptureUnsupported;
  // cudaFree synchronizes the device first.
  cudaDeviceSynchronize();
  return Release(p, {Memory::kDevice, Memory::kPool});
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  if (RefusedByCapture()) return cudaErrorStreamCaptureUnsupported;
  *p = Allocate(bytes, Memory::kPinned);
  return *p == nullptr ? Fail(cudaErrorMemoryAllocation) : cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned flags) {
  if (flags != cudaHostAllocDefault) return Fail(cudaErrorNotSupported);
  return cudaMallocHost(p, bytes);
}

cudaError_t cudaFreeHost(void* p) {
  if (RefusedByCapture()) return cudaErrorStreamCaptureUnsupported;
  cudaDeviceSynchronize();
  return Release(p, {Memory::kPinned});
}

cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t stream) {
  CUstream_st* s = Resolve(stream);
  if (s->capture != nullptr) {
    std::fprintf(stderr, "CUDA emulator: cudaMallocAsync during a capture is not emulated\n");
    return Fail(cudaErrorNotSupported);
  }
  *p = Allocate(bytes, Memory::kPool);
  return *p == nullptr ? Fail(cudaErrorMemoryAllocation) : cudaSuccess;
}

cudaError_t cudaFreeAsync(void* p, cudaStream_t stream) {
  if (p == nullptr) return cudaSuccess;
  if (!IsDevice(p, 1)) return Fail(cudaErrorInvalidValue);
  CUstream_st* s = Resolve(stream);
  if (s->capture != nullptr) {
    std::fprintf(stderr, "CUDA emulator: cudaFreeAsync during a capture is not emulated\n");
    return Fail(cudaErrorNotSupported);
  }
  Enqueue(s, [p] { Release(p, {Memory::kPool, Memory::kDevice}); });
  return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (device < 0 || device >= S().devices) return Fail(cudaErrorInvalidDevice);
  *pool = S().pools[device].get();
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  switch (attr) {
    case cudaMemPoolAttrReleaseThreshold: pool->release_threshold = *static_cast<uint64_t*>(value); return cudaSuccess;
    case cudaMemPoolReuseAllowInternalDependencies:
      pool->reuse_internal_dependencies = *static_cast<int*>(value);
      return cudaSuccess;
    default: return Fail(cudaErrorInvalidValue);
  }
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  switch (attr) {
    case cudaMemPoolAttrReleaseThreshold: *static_cast<uint64_t*>(value) = pool->release_threshold; return cudaSuccess;
    case cudaMemPoolReuseAllowInternalDependencies:
      *static_cast<int*>(value) = pool->reuse_internal_dependencies;
      return cudaSuccess;
    default: return Fail(cudaErrorInvalidValue);
  }
}

cudaError_t cudaMemPoolSetAccess(cudaMemPool_t, const cudaMemAccessDesc* descs, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (descs[i].location.type != cudaMemLocationTypeDevice || descs[i].location.id < 0 ||
        descs[i].location.id >= S().devices) {
      return Fail(cudaErrorInvalidValue);
    }
  }
  return cudaSuccess;
}

cudaError_t cudaMemPoolGetAccess(cudaMemAccessFlags* flags, cudaMemPool_t, cudaMemLocation* location) {
  if (location->type != cudaMemLocationTypeDevice) return Fail(cudaErrorInvalidValue);
  *flags = cudaMemAccessFlagsProtReadWrite;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (RefusedByCapture()) return cudaErrorStreamCaptureUnsupported;
  if (cudaError_t e = CheckCopy(dst, src, bytes, kind); e != cudaSuccess) return Fail(e);
  return RunOnLegacy([dst, src, bytes] { std::memcpy(dst, src, bytes); });
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (cudaError_t e = CheckCopy(dst, src, bytes, kind); e != cudaSuccess) return Fail(e);
  if (bytes == 0) return cudaSuccess;
  CUstream_st* s = Resolve(stream);
  if (!IsLive(s)) return Fail(cudaErrorInvalidResourceHandle);
  const bool host_src = !IsDevice(src, 1), host_dst = !IsDevice(dst, 1);
  const bool pageable = (host_src && !IsPinned(src, bytes)) || (host_dst && !IsPinned(dst, bytes));
  if (pageable && s->capture != nullptr) {
    std::lock_guard<std::mutex> l(S().mu);
    s->capture_invalid = true;
    return Fail(cudaErrorStreamCaptureUnsupported);
  }
  if (host_src && pageable) {
    // Pageable source: staged at the call, so the caller may reuse its buffer at once.
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                                static_cast<const unsigned char*>(src) + bytes);
    Enqueue(s, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
    return cudaSuccess;
  }
  const uint64_t mark = Enqueue(s, [dst, src, bytes] { std::memcpy(dst, src, bytes); });
  if (host_dst && pageable) {
    // Pageable destination: the call returns once the copy is done.
    std::unique_lock<std::mutex> l(S().mu);
    WaitDone(l, s, mark);
  }
  return cudaSuccess;
}

// IPC handles name a memfd of the exporting process (a cudaMalloc allocation, an interprocess event's
// progress page), which another process opens through /proc. As on a GPU, a process may not open its
// own handles, and only cudaMalloc memory (not the stream-ordered pool's) exports.
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* p) {
  IpcHandle h{kIpcMagic, getpid(), -1, 0, 0, 0};
  {
    std::lock_guard<std::mutex> l(S().mu);
    auto it = S().allocations.find(reinterpret_cast<uintptr_t>(p));
    if (it == S().allocations.end() || it->second.kind != Memory::kDevice) return Fail(cudaErrorInvalidValue);
    h.fd = it->second.fd;
    h.mapped = it->second.region_bytes - PageBytes();
    h.offset = it->second.offset;
    h.bytes = it->second.bytes;
  }
  std::memset(handle, 0, sizeof(*handle));
  std::memcpy(handle->reserved, &h, sizeof(h));
  return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void** p, cudaIpcMemHandle_t handle, unsigned flags) {
  if (flags != cudaIpcMemLazyEnablePeerAccess) return Fail(cudaErrorInvalidValue);
  // LPEMU_FAIL=ipc-open: what containers that do not share an IPC namespace get.
  if (const char* fail = std::getenv("LPEMU_FAIL"); fail != nullptr && std::strstr(fail, "ipc-open") != nullptr) {
    return Fail(cudaErrorMapBufferObjectFailed);
  }
  cudaError_t e;
  Allocation a{0, Memory::kImported};
  if (!OpenIpc(handle.reserved, 1, &a, &e)) return Fail(e);
  *p = a.region + a.offset;
  Register(*p, a);
  return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void* p) { return Release(p, {Memory::kImported}); }

}  // extern "C"
