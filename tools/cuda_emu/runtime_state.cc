#include "tools/cuda_emu/runtime_state.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tools/cuda_emu/block_exec.h"

namespace lpemu {
namespace {

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

// The live allocation holding [p, p + bytes), if any (the lock held).
const std::pair<const uintptr_t, Allocation>* Find(uintptr_t p, size_t bytes) {
  State& st = S();
  auto it = st.allocations.upper_bound(p);
  if (it == st.allocations.begin()) return nullptr;
  --it;
  return p >= it->first && p + bytes <= it->first + it->second.bytes ? &*it : nullptr;
}

}  // namespace

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
thread_local int tls_device = -1;
thread_local CUstream_st* tls_capturing = nullptr;

cudaError_t Fail(cudaError_t e) {
  tls_last_error = e;
  return e;
}

int CurrentDevice() { return tls_device < 0 ? 0 : tls_device; }

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

}  // namespace lpemu
