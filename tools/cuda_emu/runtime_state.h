// The emulated runtime's shared state and helpers (runtime_*.cc): the handle types the runtime headers
// leave opaque, the allocation table, the streams' queues, and the checks every call makes.
#ifndef LAYERPIPE_TOOLS_CUDA_EMU_RUNTIME_STATE_H_
#define LAYERPIPE_TOOLS_CUDA_EMU_RUNTIME_STATE_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "tools/cuda_emu/runtime_internal.h"

// The opaque handle types of the runtime headers, defined by the emulator.
struct CUstream_st {
  int device = 0;
  bool stopping = false;
  std::deque<lpemu::Op> queue;
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
  std::vector<lpemu::Op> ops;
};

struct CUgraphExec_st {
  std::vector<lpemu::Op> ops;
};

struct CUmemPoolHandle_st {
  uint64_t release_threshold = 0;
  int reuse_internal_dependencies = 1;
};

namespace lpemu {

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

inline bool IsDeviceKind(Memory m) { return m != Memory::kPinned; }

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

State& S();

// The calling thread's last error (cudaGetLastError), its current device (-1: it never chose one and
// has no context), and the stream it captures, if any.
extern thread_local cudaError_t tls_last_error;
extern thread_local int tls_device;
extern thread_local CUstream_st* tls_capturing;

cudaError_t Fail(cudaError_t e);
int CurrentDevice();
CUstream_st* NewStream(int device);
// The stream a handle names: 0, cudaStreamLegacy and cudaStreamPerThread are the default stream.
CUstream_st* Resolve(cudaStream_t stream);
bool IsLive(CUstream_st* s);
// Waits (the lock held) until the stream has run everything enqueued up to `mark`.
void WaitDone(std::unique_lock<std::mutex>& l, CUstream_st* s, uint64_t mark);
bool IsDevice(const void* p, size_t bytes);
bool IsPinned(const void* p, size_t bytes);
void Register(void* p, Allocation a);
size_t PageBytes();
// Maps `mapped` bytes of `fd` (anonymous memory when fd < 0) followed by an inaccessible guard page.
char* MapGuarded(int fd, size_t mapped, size_t* region_bytes);
void* Allocate(size_t bytes, Memory kind);
// Frees an allocation of one of `kinds`; anything else is cudaErrorInvalidValue.
cudaError_t Release(void* p, std::initializer_list<Memory> kinds);
// Maps another process's memfd named by an IPC handle, with a guard page after it, into *a; false
// (and the error) when it cannot.
bool OpenIpc(const char* reserved, uint64_t min_bytes, Allocation* a, cudaError_t* error);
// Waits until `event` has completed record `generation` (the lock held). An interprocess event may
// be completed by another process, which cannot signal this one's condition variable: polled.
void WaitEvent(std::unique_lock<std::mutex>& l, cudaEvent_t event, uint64_t generation);
// A call a capturing thread may not make (cudaStreamCaptureModeThreadLocal): it fails and the
// capture is invalidated, as the runtime does.
bool RefusedByCapture();
// Synchronous work on the default stream, in its order.
cudaError_t RunOnLegacy(Op op);

}  // namespace lpemu

#endif  // LAYERPIPE_TOOLS_CUDA_EMU_RUNTIME_STATE_H_
