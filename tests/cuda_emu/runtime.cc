// The CUDA runtime calls the backend makes, on the host: device memory is host memory, every stream has
// a host thread that executes its work in order (so work on two streams really overlaps, and a missing
// event wait shows), events and graphs behave as the runtime documents. The checks a GPU makes are
// made here too and answered with the same error codes: copies must lie inside live allocations of the
// kind their direction names, a capture refuses synchronous calls and pageable copies, launches are
// held to the device's limits.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/cuda_emu/block_exec.h"
#include "tests/cuda_emu/runtime_internal.h"

using lpemu::Op;

// The opaque handle types of the runtime headers, defined by the emulator.
struct CUstream_st {
  int device = 0;
  bool stopping = false;
  std::deque<Op> queue;
  uint64_t enqueued = 0, done = 0;
  struct CUgraph_st* capture = nullptr;  // non-null while capturing
  bool capture_invalid = false;
  std::thread worker;
};

// An event's progress: records made (at the call) and records completed (on the stream). An
// interprocess event keeps it in a shared page that another process maps (cudaIpcOpenEventHandle).
struct EventProgress {
  std::atomic<uint64_t> recorded{0}, completed{0};
};

struct CUevent_st {
  unsigned flags = 0;
  EventProgress* progress = nullptr;
  int fd = -1;  // the shared page's memfd (interprocess events), -1 otherwise
};

struct CUgraph_st {
  std::vector<Op> ops;
};

struct CUgraphExec_st {
  std::vector<Op> ops;
};

struct CUmemPoolHandle_st {
  uint64_t release_threshold = 0;
  int reuse_internal_dependencies = 1;
};

namespace lpemu {
namespace {

constexpr int kSmCount = 132;  // an H200's
constexpr size_t kDefaultSmem = 48 << 10;
constexpr size_t kMaxSmemOptIn = 227 << 10;

// kDevice: cudaMalloc, in a memfd so that another process can map it (cudaIpcOpenMemHandle);
// kPool: cudaMallocAsync, which CUDA does not export either; kImported: another process's kDevice.
// Device memory of all three ends where an inaccessible guard page begins (to the 256-byte granule of
// CUDA's allocations), so a kernel or copy that runs past an allocation's end faults at once.
enum class Memory { kDevice, kPool, kImported, kPinned };
struct Allocation {
  size_t bytes;
  Memory kind;
  char* region = nullptr;   // device kinds: the mapping, guard page included
  size_t region_bytes = 0;
  size_t offset = 0;        // of the allocation within the memfd (kDevice, kImported)
  int fd = -1;              // kDevice: the memfd, open while the allocation lives
};

bool IsDeviceKind(Memory m) { return m != Memory::kPinned; }

// The handle formats of the emulator's IPC: a process and a memfd of it.
constexpr uint64_t kIpcMagic = 0x6c70656d75697063ull;  // "lpemuipc"
struct IpcHandle {
  uint64_t magic;
  int64_t pid;
  int64_t fd;
  uint64_t mapped;  // the memfd's length
  uint64_t offset;  // where the allocation starts in it
  uint64_t bytes;   // the allocation's length
};
static_assert(sizeof(IpcHandle) <= CUDA_IPC_HANDLE_SIZE);

// One lock for all of the emulator's state; work itself runs outside it.
struct State {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uintptr_t, Allocation> allocations;
  std::map<const void*, int> max_dynamic_smem;
  std::set<CUstream_st*> streams;
  std::vector<std::unique_ptr<CUmemPoolHandle_st>> pools;
  CUstream_st* legacy = nullptr;
  int devices = 1;
};

// A fault in a kernel (past an allocation's end, into its guard page) names the kernel before the
// process dies as it would have.
void OnFault(int sig, siginfo_t* info, void*) {
  const char* kernel = RunningKernelName();
  char line[512];
  const int n = std::snprintf(line, sizeof(line), "CUDA emulator: invalid memory access at %p%s%s\n", info->si_addr,
                              kernel != nullptr ? " in kernel " : " outside kernels", kernel != nullptr ? kernel : "");
  if (n > 0) (void)!write(2, line, static_cast<size_t>(std::min(n, int(sizeof(line)) - 1)));
  signal(sig, SIG_DFL);
  raise(sig);
}

void InstallFaultReport() {
  struct sigaction sa {};
  sa.sa_sigaction = &OnFault;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
}

State& S() {
  static State* s = [] {
    auto* st = new State();
    if (const char* env = std::getenv("LPEMU_DEVICE_COUNT"); env != nullptr && *env != '\0') {
      st->devices = std::max(1, std::atoi(env));
    }
    for (int d = 0; d < st->devices; ++d) st->pools.push_back(std::make_unique<CUmemPoolHandle_st>());
    InstallFaultReport();
    // Every device allocation holds a memfd open (Allocation::fd).
    rlimit files{};
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
      files.rlim_cur = files.rlim_max;
      setrlimit(RLIMIT_NOFILE, &files);
    }
    return st;
  }();
  return *s;
}

thread_local cudaError_t tls_last_error = cudaSuccess;
thread_local int tls_device = -1;  // -1: the thread never chose one (and has no context)
thread_local CUstream_st* tls_capturing = nullptr;

cudaError_t Fail(cudaError_t e) {
  tls_last_error = e;
  return e;
}

int CurrentDevice() { return tls_device < 0 ? 0 : tls_device; }

void Worker(CUstream_st* s) {
  State& st = S();
  std::unique_lock<std::mutex> l(st.mu);
  for (;;) {
    st.cv.wait(l, [s] { return !s->queue.empty() || s->stopping; });
    if (s->queue.empty()) break;
    Op op = std::move(s->queue.front());
    s->queue.pop_front();
    l.unlock();
    op();
    l.lock();
    ++s->done;
    st.cv.notify_all();
  }
  l.unlock();
  delete s;  // cudaStreamDestroy let go of it; the queue has drained
}

CUstream_st* NewStream(int device) {
  auto* s = new CUstream_st();
  s->device = device;
  s->worker = std::thread(Worker, s);
  s->worker.detach();
  return s;
}

// The stream a handle names: 0, cudaStreamLegacy and cudaStreamPerThread are the default stream.
CUstream_st* Resolve(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    State& st = S();
    std::lock_guard<std::mutex> l(st.mu);
    if (st.legacy == nullptr) st.legacy = NewStream(0);
    return st.legacy;
  }
  return stream;
}

bool IsLive(CUstream_st* s) {
  State& st = S();
  std::lock_guard<std::mutex> l(st.mu);
  return s == st.legacy || st.streams.count(s) != 0;
}

// Waits (the lock held) until the stream has run everything enqueued up to `mark`.
void WaitDone(std::unique_lock<std::mutex>& l, CUstream_st* s, uint64_t mark) {
  S().cv.wait(l, [s, mark] { return s->done >= mark; });
}

// The live allocation holding [p, p + bytes), if any (the lock held).
const std::pair<const uintptr_t, Allocation>* Find(uintptr_t p, size_t bytes) {
  State& st = S();
  auto it = st.allocations.upper_bound(p);
  if (it == st.allocations.begin()) return nullptr;
  --it;
  return p >= it->first && p + bytes <= it->first + it->second.bytes ? &*it : nullptr;
}

bool IsDevice(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> l(S().mu);
  const auto* a = Find(reinterpret_cast<uintptr_t>(p), bytes);
  return a != nullptr && IsDeviceKind(a->second.kind);
}

bool IsPinned(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> l(S().mu);
  const auto* a = Find(reinterpret_cast<uintptr_t>(p), bytes);
  return a != nullptr && a->second.kind == Memory::kPinned;
}

void Register(void* p, Allocation a) {
  std::lock_guard<std::mutex> l(S().mu);
  S().allocations[reinterpret_cast<uintptr_t>(p)] = a;
}

size_t PageBytes() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

// Maps `mapped` bytes of `fd` (anonymous memory when fd < 0) followed by an inaccessible guard page.
char* MapGuarded(int fd, size_t mapped, size_t* region_bytes) {
  *region_bytes = mapped + PageBytes();
  void* region = mmap(nullptr, *region_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (region == MAP_FAILED) return nullptr;
  void* m = fd >= 0 ? mmap(region, mapped, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0)
                    : mmap(region, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (m == MAP_FAILED) {
    munmap(region, *region_bytes);
    return nullptr;
  }
  return static_cast<char*>(region);
}

void* Allocate(size_t bytes, Memory kind) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  void* p = nullptr;
  Allocation a{bytes, kind};
  if (kind == Memory::kDevice || kind == Memory::kPool) {
    const size_t mapped = (rounded + PageBytes() - 1) / PageBytes() * PageBytes();
    if (kind == Memory::kDevice) {
      a.fd = memfd_create("lpemu-device", MFD_CLOEXEC);
      if (a.fd < 0) return nullptr;
      if (ftruncate(a.fd, static_cast<off_t>(mapped)) != 0) {
        close(a.fd);
        return nullptr;
      }
    }
    a.region = MapGuarded(a.fd, mapped, &a.region_bytes);
    if (a.region == nullptr) {
      if (a.fd >= 0) close(a.fd);
      return nullptr;
    }
    a.offset = mapped - rounded;
    p = a.region + a.offset;
  } else {
    p = std::aligned_alloc(256, rounded);
    if (p == nullptr) return nullptr;
  }
  // Fresh device memory is undefined: all-ones bytes read as NaN, so a read before any write shows.
  if (kind != Memory::kPinned) std::memset(p, 0xFF, rounded);
  Register(p, a);
  return p;
}

// Frees an allocation of one of `kinds`; anything else is cudaErrorInvalidValue.
cudaError_t Release(void* p, std::initializer_list<Memory> kinds) {
  if (p == nullptr) return cudaSuccess;
  Allocation a;
  {
    std::lock_guard<std::mutex> l(S().mu);
    auto it = S().allocations.find(reinterpret_cast<uintptr_t>(p));
    if (it == S().allocations.end() || std::find(kinds.begin(), kinds.end(), it->second.kind) == kinds.end()) {
      return Fail(cudaErrorInvalidValue);
    }
    a = it->second;
    S().allocations.erase(it);
  }
  if (a.kind == Memory::kPinned) {
    std::free(p);
    return cudaSuccess;
  }
  // Poisoned first: a kernel still reading it, here or in a process that mapped it, gets NaN.
  if (a.kind != Memory::kImported) std::memset(p, 0xFF, a.bytes);
  munmap(a.region, a.region_bytes);
  if (a.fd >= 0) close(a.fd);
  return cudaSuccess;
}

// Waits until `event` has completed record `generation` (the lock held). An interprocess event may
// be completed by another process, which cannot signal this one's condition variable: polled.
void WaitEvent(std::unique_lock<std::mutex>& l, cudaEvent_t event, uint64_t generation) {
  EventProgress* p = event->progress;
  while (p->completed.load() < generation) S().cv.wait_for(l, std::chrono::microseconds(200));
}

// A call a capturing thread may not make (cudaStreamCaptureModeThreadLocal): it fails and the
// capture is invalidated, as the runtime does.
bool RefusedByCapture() {
  if (tls_capturing == nullptr) return false;
  State& st = S();
  std::lock_guard<std::mutex> l(st.mu);
  tls_capturing->capture_invalid = true;
  tls_last_error = cudaErrorStreamCaptureUnsupported;
  return true;
}

// Synchronous work on the default stream, in its order.
cudaError_t RunOnLegacy(Op op) {
  CUstream_st* s = Resolve(nullptr);
  const uint64_t mark = Enqueue(s, std::move(op));
  std::unique_lock<std::mutex> l(S().mu);
  WaitDone(l, s, mark);
  return cudaSuccess;
}

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

uint64_t Enqueue(CUstream_st* s, Op op) {
  State& st = S();
  std::lock_guard<std::mutex> l(st.mu);
  if (s->capture != nullptr) {
    s->capture->ops.push_back(std::move(op));
    return 0;
  }
  s->queue.push_back(std::move(op));
  st.cv.notify_all();
  return ++s->enqueued;
}

CUstream_st* StreamOf(cudaStream_t stream) { return Resolve(stream); }

bool InsideDeviceAllocation(const void* p, size_t bytes) { return IsDevice(p, bytes); }

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

cudaError_t cudaDeviceSynchronize() {
  if (RefusedByCapture()) return cudaErrorStreamCaptureUnsupported;
  State& st = S();
  std::unique_lock<std::mutex> l(st.mu);
  std::vector<std::pair<CUstream_st*, uint64_t>> marks;
  for (CUstream_st* s : st.streams) marks.emplace_back(s, s->enqueued);
  if (st.legacy != nullptr) marks.emplace_back(st.legacy, st.legacy->enqueued);
  for (auto& [s, mark] : marks) WaitDone(l, s, mark);
  return cudaSuccess;
}

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

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (flags != cudaStreamDefault && flags != cudaStreamNonBlocking) return Fail(cudaErrorInvalidValue);
  CUstream_st* s = NewStream(CurrentDevice());
  State& st = S();
  std::lock_guard<std::mutex> l(st.mu);
  st.streams.insert(s);
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  State& st = S();
  std::lock_guard<std::mutex> l(st.mu);
  if (st.streams.erase(stream) == 0) return Fail(cudaErrorInvalidResourceHandle);
  if (stream->capture != nullptr) {
    std::fprintf(stderr, "CUDA emulator: a stream destroyed while it captures\n");
    std::abort();
  }
  stream->stopping = true;  // its worker finishes the queue, then frees it
  st.cv.notify_all();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  CUstream_st* s = Resolve(stream);
  if (!IsLive(s)) return Fail(cudaErrorInvalidResourceHandle);
  if (s->capture != nullptr || RefusedByCapture()) {
    std::lock_guard<std::mutex> l(S().mu);
    if (s->capture != nullptr) s->capture_invalid = true;
    return Fail(cudaErrorStreamCaptureUnsupported);
  }
  std::unique_lock<std::mutex> l(S().mu);
  WaitDone(l, s, s->enqueued);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  CUstream_st* s = Resolve(stream);
  if (!IsLive(s)) return Fail(cudaErrorInvalidResourceHandle);
  if (RefusedByCapture()) return cudaErrorStreamCaptureUnsupported;
  std::lock_guard<std::mutex> l(S().mu);
  return s->done >= s->enqueued ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if ((flags & cudaEventInterprocess) != 0 && (flags & cudaEventDisableTiming) == 0) return Fail(cudaErrorInvalidValue);
  auto* e = new CUevent_st();
  e->flags = flags;
  if ((flags & cudaEventInterprocess) != 0) {
    e->fd = memfd_create("lpemu-event", MFD_CLOEXEC);
    void* page = MAP_FAILED;
    if (e->fd < 0 || ftruncate(e->fd, sizeof(EventProgress)) != 0 ||
        (page = mmap(nullptr, sizeof(EventProgress), PROT_READ | PROT_WRITE, MAP_SHARED, e->fd, 0)) == MAP_FAILED) {
      if (e->fd >= 0) close(e->fd);
      delete e;
      return Fail(cudaErrorMemoryAllocation);
    }
    e->progress = new (page) EventProgress();
  } else {
    e->progress = new EventProgress();
  }
  *event = e;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

// Events are not freed: work still queued may record or wait on one after cudaEventDestroy, and tests
// create few of them.
cudaError_t cudaEventDestroy(cudaEvent_t event) { return event == nullptr ? Fail(cudaErrorInvalidResourceHandle) : cudaSuccess; }

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  CUstream_st* s = Resolve(stream);
  if (!IsLive(s)) return Fail(cudaErrorInvalidResourceHandle);
  if (s->capture != nullptr) {
    std::fprintf(stderr, "CUDA emulator: event records inside a capture are not emulated\n");
    std::lock_guard<std::mutex> l(S().mu);
    s->capture_invalid = true;
    return Fail(cudaErrorStreamCaptureUnsupported);
  }
  uint64_t generation;
  {
    std::lock_guard<std::mutex> l(S().mu);
    generation = ++event->progress->recorded;
  }
  EventProgress* progress = event->progress;
  Enqueue(s, [progress, generation] {
    State& st = S();
    std::lock_guard<std::mutex> l(st.mu);
    uint64_t done = progress->completed.load();
    while (done < generation && !progress->completed.compare_exchange_weak(done, generation)) {
    }
    st.cv.notify_all();
  });
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  CUstream_st* s = Resolve(stream);
  if (!IsLive(s) || event == nullptr || flags != 0) return Fail(cudaErrorInvalidValue);
  uint64_t generation;
  {
    std::lock_guard<std::mutex> l(S().mu);
    generation = event->progress->recorded.load();  // the record most recent at this call
  }
  if (s->capture != nullptr) {
    std::fprintf(stderr, "CUDA emulator: event waits inside a capture are not emulated\n");
    std::lock_guard<std::mutex> l(S().mu);
    s->capture_invalid = true;
    return Fail(cudaErrorStreamCaptureUnsupported);
  }
  if (generation == 0) return cudaSuccess;
  Enqueue(s, [event, generation] {
    std::unique_lock<std::mutex> l(S().mu);
    WaitEvent(l, event, generation);
  });
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (RefusedByCapture()) return cudaErrorStreamCaptureUnsupported;
  std::lock_guard<std::mutex> l(S().mu);
  return event->progress->completed.load() >= event->progress->recorded.load() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (RefusedByCapture()) return cudaErrorStreamCaptureUnsupported;
  State& st = S();
  std::unique_lock<std::mutex> l(st.mu);
  WaitEvent(l, event, event->progress->recorded.load());
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  CUstream_st* s = Resolve(stream);
  if (s == S().legacy || !IsLive(s)) return Fail(cudaErrorStreamCaptureUnsupported);
  if (mode != cudaStreamCaptureModeThreadLocal) {
    std::fprintf(stderr, "CUDA emulator: only thread-local capture is emulated\n");
    return Fail(cudaErrorNotSupported);
  }
  State& st = S();
  std::unique_lock<std::mutex> l(st.mu);
  if (s->capture != nullptr || tls_capturing != nullptr) return Fail(cudaErrorIllegalState);
  // Work enqueued before the capture still runs first; the graph's launches come after it.
  s->capture = new CUgraph_st();
  s->capture_invalid = false;
  tls_capturing = s;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  CUstream_st* s = Resolve(stream);
  State& st = S();
  std::unique_lock<std::mutex> l(st.mu);
  if (s->capture == nullptr || tls_capturing != s) return Fail(cudaErrorIllegalState);
  CUgraph_st* g = s->capture;
  const bool invalid = s->capture_invalid;
  s->capture = nullptr;
  tls_capturing = nullptr;
  if (invalid) {
    delete g;
    *graph = nullptr;
    return Fail(cudaErrorStreamCaptureInvalidated);
  }
  *graph = g;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  if (graph == nullptr || flags != 0) return Fail(cudaErrorInvalidValue);
  auto* e = new CUgraphExec_st();
  e->ops = graph->ops;
  *exec = e;
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  CUstream_st* s = Resolve(stream);
  if (exec == nullptr || !IsLive(s)) return Fail(cudaErrorInvalidResourceHandle);
  for (const Op& op : exec->ops) Enqueue(s, op);
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
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

namespace {

// Maps another process's memfd named by an IPC handle, with a guard page after it, into *a; false
// (and the error) when it cannot.
bool OpenIpc(const char* reserved, uint64_t min_bytes, Allocation* a, cudaError_t* error) {
  IpcHandle h;
  std::memcpy(&h, reserved, sizeof(h));
  *error = cudaErrorInvalidValue;
  if (h.magic != kIpcMagic || h.bytes < min_bytes || h.offset + h.bytes > h.mapped) return false;
  if (h.pid == getpid()) {
    *error = cudaErrorDeviceUninitialized;  // CUDA refuses a process its own handles
    return false;
  }
  const std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  a->region = MapGuarded(fd, h.mapped, &a->region_bytes);
  close(fd);
  if (a->region == nullptr) return false;
  a->offset = h.offset;
  a->bytes = h.bytes;
  *error = cudaSuccess;
  return true;
}

}  // namespace

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

cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t* handle, cudaEvent_t event) {
  if ((event->flags & cudaEventInterprocess) == 0 || event->fd < 0) return Fail(cudaErrorInvalidResourceHandle);
  const IpcHandle h{kIpcMagic, getpid(), event->fd, sizeof(EventProgress), 0, sizeof(EventProgress)};
  std::memset(handle, 0, sizeof(*handle));
  std::memcpy(handle->reserved, &h, sizeof(h));
  return cudaSuccess;
}

cudaError_t cudaIpcOpenEventHandle(cudaEvent_t* event, cudaIpcEventHandle_t handle) {
  cudaError_t e;
  Allocation page{0, Memory::kImported};
  if (!OpenIpc(handle.reserved, sizeof(EventProgress), &page, &e)) return Fail(e);
  auto* ev = new CUevent_st();
  ev->flags = cudaEventDisableTiming | cudaEventInterprocess;
  ev->progress = reinterpret_cast<EventProgress*>(page.region);
  *event = ev;
  return cudaSuccess;
}

}  // extern "C"
