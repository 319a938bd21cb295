// The runtime's device, error and launch calls: device queries (an H200's answers), errors, the driver
// entry points the backend looks up, and kernel launches held to the device's limits.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>

#include "tools/cuda_emu/block_exec.h"
#include "tools/cuda_emu/runtime_state.h"

namespace lpemu {
namespace {

int DriverCurrentContext(CUcontext* ctx) {
  *ctx = tls_device < 0 ? nullptr : reinterpret_cast<CUcontext>(static_cast<uintptr_t>(0x1000 + tls_device));
  return CUDA_SUCCESS;
}

int DriverDeviceGet(CUdevice* device, int ordinal) {
  if (ordinal < 0 || ordinal >= S().devices) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

// Every device's primary context is active once any thread has used the emulator.
int DriverPrimaryCtxGetState(CUdevice device, unsigned* flags, int* active) {
  if (device < 0 || device >= S().devices) return CUDA_ERROR_INVALID_DEVICE;
  *flags = 0;
  *active = 1;
  return CUDA_SUCCESS;
}

}  // namespace

void SubmitKernel(cudaStream_t stream, KernelLaunch launch) {
  const dim3 g = launch.grid, b = launch.block;
  const uint64_t threads = uint64_t{b.x} * b.y * b.z;
  if (g.x == 0 || g.y == 0 || g.z == 0 || threads == 0 || threads > 1024 || b.z > 64 || g.y > 65535 || g.z > 65535 ||
      g.x > 0x7fffffffu) {
    Fail(cudaErrorInvalidConfiguration);
    return;
  }
  if (launch.smem > kDefaultSmem) {
    State& st = S();
    std::lock_guard<std::mutex> l(st.mu);
    auto it = st.max_dynamic_smem.find(launch.fn);
    if (it == st.max_dynamic_smem.end() || launch.smem > static_cast<size_t>(it->second)) {
      std::fprintf(stderr, "CUDA emulator: %s asks for %zu bytes of dynamic shared memory; cudaFuncSetAttribute allowed %d\n",
                   launch.name, launch.smem, it == st.max_dynamic_smem.end() ? int(kDefaultSmem) : it->second);
      tls_last_error = cudaErrorInvalidValue;
      return;
    }
  }
  CUstream_st* s = Resolve(stream);
  if (!IsLive(s)) {
    Fail(cudaErrorInvalidResourceHandle);
    return;
  }
  auto shared = std::make_shared<KernelLaunch>(std::move(launch));
  Enqueue(s, [shared] { RunGrid(*shared); });
}

}  // namespace lpemu

using namespace lpemu;  // NOLINT: the definitions below are the runtime's C API

extern "C" {

cudaError_t cudaGetLastError() {
  const cudaError_t e = tls_last_error;
  tls_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() { return tls_last_error; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorPeerAccessAlreadyEnabled: return "cudaErrorPeerAccessAlreadyEnabled";
    case cudaErrorDeviceUninitialized: return "cudaErrorDeviceUninitialized";
    case cudaErrorMapBufferObjectFailed: return "cudaErrorMapBufferObjectFailed";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error" : cudaGetErrorName(e);
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = S().devices;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= S().devices) return Fail(cudaErrorInvalidDevice);
  tls_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = CurrentDevice();
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= S().devices) return Fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = kSmCount; return cudaSuccess;
    case cudaDevAttrMemoryPoolsSupported: *value = 1; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    case cudaDevAttrWarpSize: *value = 32; return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = int(kMaxSmemOptIn); return cudaSuccess;
    default:
      std::fprintf(stderr, "CUDA emulator: device attribute %d is not emulated\n", static_cast<int>(attr));
      return Fail(cudaErrorInvalidValue);
  }
}

cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int len, int device) {
  if (device < 0 || device >= S().devices || len <= 0) return Fail(cudaErrorInvalidValue);
  std::snprintf(bus_id, static_cast<size_t>(len), "0000:%02X:00.0", 0x10 + device);
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  const int n = S().devices;
  if (device < 0 || device >= n || peer < 0 || peer >= n) return Fail(cudaErrorInvalidDevice);
  *can = device != peer;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags) {
  if (peer < 0 || peer >= S().devices || flags != 0) return Fail(cudaErrorInvalidValue);
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* fn, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return Fail(cudaErrorNotSupported);
  if (value < 0 || static_cast<size_t>(value) > kMaxSmemOptIn) return Fail(cudaErrorInvalidValue);
  State& st = S();
  std::lock_guard<std::mutex> l(st.mu);
  st.max_dynamic_smem[fn] = value;
  return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int, unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
  const std::string name = symbol;
  *fn = nullptr;
  if (name == "cuCtxGetCurrent") *fn = reinterpret_cast<void*>(&DriverCurrentContext);
  if (name == "cuDeviceGet") *fn = reinterpret_cast<void*>(&DriverDeviceGet);
  if (name == "cuDevicePrimaryCtxGetState") *fn = reinterpret_cast<void*>(&DriverPrimaryCtxGetState);
  if (status != nullptr) *status = *fn != nullptr ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

}  // extern "C"
