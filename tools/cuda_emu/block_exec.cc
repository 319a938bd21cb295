#include "tools/cuda_emu/block_exec.h"

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" void lpemu_fiber_switch(void** save_sp, void* load_sp);

namespace lpemu {
namespace {

constexpr size_t kStackBytes = size_t{256} << 10;
constexpr size_t kGuardBytes = 4096;  // PROT_NONE below each stack: an overflow faults at once
constexpr int kMaxThreadsPerBlock = 1024;
constexpr int kWarp = 32;

enum class Wait : uint8_t { kRunnable, kWarp, kBlock, kDone };

// One host thread's fibers and the block they currently run.
class BlockExec {
 public:
  BlockExec() = default;
  BlockExec(const BlockExec&) = delete;
  BlockExec& operator=(const BlockExec&) = delete;
  ~BlockExec() {
    for (unsigned char* s : stacks_) munmap(s, kGuardBytes + kStackBytes);
  }

  void Run(const KernelLaunch& launch);

  [[noreturn]] void Fault(const std::string& what) const {
    std::fprintf(stderr, "CUDA emulator: kernel %s, block (%u,%u,%u), thread (%u,%u,%u): %s\n",
                 launch_ ? launch_->name : "?", coords_.block_idx.x, coords_.block_idx.y, coords_.block_idx.z,
                 coords_.thread_idx.x, coords_.thread_idx.y, coords_.thread_idx.z, what.c_str());
    std::fflush(stderr);
    std::abort();
  }

  const ThreadCoords& coords() const {
    if (current_ < 0) {
      std::fprintf(stderr, "CUDA emulator: a thread coordinate was read outside a kernel\n");
      std::abort();
    }
    return coords_;
  }

  void BlockWait() {
    wait_[current_] = Wait::kBlock;
    SwitchTo(-1);
  }
  void Finish() {
    wait_[current_] = Wait::kDone;
    SwitchTo(-1);
  }
  void WarpWait();
  uint64_t Shuffle(unsigned mask, uint64_t bits, ::lpemu::Shuffle kind, int arg, int width, const char* what);
  void CheckWarpOp(unsigned mask, int width, const char* what) const;
  void* dynamic_shared() { return smem_.empty() ? nullptr : smem_.data(); }
  const char* kernel_name() const { return launch_ != nullptr ? launch_->name : nullptr; }

 private:
  static void FiberEntry();
  void RunBlock();
  void* FreshStack(int i);
  void SwitchTo(int next);
  int WarpLanes(int warp) const { return threads_ - warp * kWarp < kWarp ? threads_ - warp * kWarp : kWarp; }
  void CheckWarpsIdle();
  bool ReleaseBlock();

  const KernelLaunch* launch_ = nullptr;
  ThreadCoords coords_{};
  int threads_ = 0, warps_ = 0;
  int current_ = -1;  // the running fiber; -1: the scheduler
  bool forward_ = true;
  void* sched_sp_ = nullptr;
  std::vector<unsigned char*> stacks_;
  std::vector<void*> sp_;
  std::vector<uint3> thread_idx_;
  std::vector<Wait> wait_;
  std::vector<uint8_t> parity_;         // per thread: which of the two slot sets its next shuffle uses
  std::vector<int> arrived_;            // per warp: lanes waiting at its warp barrier
  std::vector<uint8_t> warp_forward_;   // per warp: the direction of its next hand-off round
  std::vector<uint64_t> slots_;         // [2][warps][32]
  std::vector<unsigned char> smem_;
};

// A pointer, so that the initial-exec model (no __tls_get_addr per access) needs 8 bytes of static TLS
// even when this library is loaded with dlopen.
thread_local BlockExec* tls_exec __attribute__((tls_model("initial-exec"))) = nullptr;

BlockExec& Exec() {
  if (tls_exec == nullptr) tls_exec = new BlockExec();  // one per host thread that runs kernels
  return *tls_exec;
}

void BlockExec::FiberEntry() {
  BlockExec& e = *tls_exec;
  e.launch_->thread_body();
  e.Finish();
  std::abort();  // a finished fiber is never resumed
}

// Leaves the running fiber (or the scheduler) for fiber `next` (-1: the scheduler).
void BlockExec::SwitchTo(int next) {
  void** save = current_ < 0 ? &sched_sp_ : &sp_[current_];
  current_ = next;
  if (next < 0) {
    lpemu_fiber_switch(save, sched_sp_);
    return;
  }
  coords_.thread_idx = thread_idx_[next];
  lpemu_fiber_switch(save, sp_[next]);
}

void* BlockExec::FreshStack(int i) {
  while (static_cast<int>(stacks_.size()) <= i) {
    void* m = mmap(nullptr, kGuardBytes + kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) Fault("cannot map a fiber stack");
    mprotect(m, kGuardBytes, PROT_NONE);
    stacks_.push_back(static_cast<unsigned char*>(m));
  }
  // The frame lpemu_fiber_switch pops (fiber_switch.cc): r15..r12, rbx, rbp, and the return address,
  // which enters FiberEntry with the stack aligned as after a call.
  auto top = reinterpret_cast<uintptr_t>(stacks_[i] + kGuardBytes + kStackBytes) & ~uintptr_t{15};
  auto* sp = reinterpret_cast<uint64_t*>(top);
  *--sp = 0;
  *--sp = reinterpret_cast<uint64_t>(&FiberEntry);
  for (int r = 0; r < 6; ++r) *--sp = 0;
  return sp;
}

void BlockExec::Run(const KernelLaunch& launch) {
  launch_ = &launch;
  threads_ = static_cast<int>(launch.block.x * launch.block.y * launch.block.z);
  warps_ = (threads_ + kWarp - 1) / kWarp;
  coords_.grid_dim = launch.grid;
  coords_.block_dim = launch.block;
  sp_.assign(threads_, nullptr);
  thread_idx_.resize(threads_);
  const dim3 bd = launch.block;
  for (int i = 0; i < threads_; ++i) thread_idx_[i] = make_uint3(i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y));
  wait_.assign(threads_, Wait::kDone);
  parity_.assign(threads_, 0);
  arrived_.assign(warps_, 0);
  warp_forward_.assign(warps_, 1);
  slots_.assign(size_t{2} * warps_ * kWarp, 0);
  // Uninitialised on a GPU: all-ones bytes read as NaN floats, so a read before any write shows.
  smem_.assign(launch.smem, 0xFF);
  for (unsigned z = 0; z < launch.grid.z; ++z) {
    for (unsigned y = 0; y < launch.grid.y; ++y) {
      for (unsigned x = 0; x < launch.grid.x; ++x) {
        coords_.block_idx = make_uint3(x, y, z);
        RunBlock();
      }
    }
  }
  launch_ = nullptr;
}

// Runs every runnable thread until all wait or are done (threads hand each other the warp barriers,
// block_exec.h), then releases a __syncthreads, until every thread is done.
void BlockExec::RunBlock() {
  for (int i = 0; i < threads_; ++i) {
    sp_[i] = FreshStack(i);
    wait_[i] = Wait::kRunnable;
  }
  for (;;) {
    bool ran = true;
    while (ran) {
      ran = false;
      for (int k = 0; k < threads_; ++k) {
        const int i = forward_ ? k : threads_ - 1 - k;
        if (wait_[i] != Wait::kRunnable) continue;
        SwitchTo(i);
        ran = true;
      }
    }
    CheckWarpsIdle();
    forward_ = !forward_;
    if (!ReleaseBlock()) return;  // every thread is done
  }
}

// A lane at a warp barrier waits for the rest of its warp. The last to arrive releases the warp and
// goes on; the others hand the host thread to the next runnable lane of the warp, in a direction that
// alternates from round to round, so no round trip through the scheduler is needed per shuffle.
void BlockExec::WarpWait() {
  const int f = current_, warp = f / kWarp, first = warp * kWarp, lanes = WarpLanes(warp);
  wait_[f] = Wait::kWarp;
  if (++arrived_[warp] == lanes) {
    arrived_[warp] = 0;
    for (int i = first; i < first + lanes; ++i) wait_[i] = Wait::kRunnable;
    warp_forward_[warp] ^= 1;
    return;
  }
  const int step = warp_forward_[warp] ? 1 : lanes - 1;
  for (int k = 1, lane = f - first; k < lanes; ++k) {
    lane = (lane + step) % lanes;
    if (wait_[first + lane] == Wait::kRunnable) {
      SwitchTo(first + lane);
      return;
    }
  }
  SwitchTo(-1);  // no lane of the warp can go on: the scheduler decides (CheckWarpsIdle)
}

// With nothing runnable, a warp with lanes at a warp barrier is stuck: the rest exited or wait at
// __syncthreads, which on a GPU hangs or is undefined.
void BlockExec::CheckWarpsIdle() {
  for (int warp = 0; warp < warps_; ++warp) {
    if (arrived_[warp] == 0) continue;
    const int first = warp * kWarp;
    std::string states;
    for (int i = first; i < first + WarpLanes(warp); ++i) {
      states += wait_[i] == Wait::kWarp ? 'W' : wait_[i] == Wait::kBlock ? 'B' : 'D';
    }
    current_ = first;
    Fault("a warp operation that not every lane of warp " + std::to_string(warp) +
          " reaches (lanes: W at the warp operation, B at __syncthreads, D exited): " + states);
  }
}

// __syncthreads releases when every thread that has not exited waits at it. Whole warps may have
// exited (GPUs drop them from the barrier's count); a warp of which only some lanes exited while the
// others wait is a barrier in divergent code, which CUDA leaves undefined.
bool BlockExec::ReleaseBlock() {
  bool any = false;
  for (int warp = 0; warp < warps_; ++warp) {
    const int first = warp * kWarp, last = first + WarpLanes(warp);
    int waiting = 0, exited = 0;
    for (int i = first; i < last; ++i) {
      waiting += wait_[i] == Wait::kBlock;
      exited += wait_[i] == Wait::kDone;
    }
    if (waiting > 0 && exited > 0) {
      current_ = first;
      Fault("__syncthreads reached by " + std::to_string(waiting) + " lanes of warp " + std::to_string(warp) +
            " while " + std::to_string(exited) + " have exited (a barrier in divergent code)");
    }
    any = any || waiting > 0;
  }
  if (!any) return false;
  for (int i = 0; i < threads_; ++i) {
    if (wait_[i] == Wait::kBlock) wait_[i] = Wait::kRunnable;
  }
  return true;
}

void BlockExec::CheckWarpOp(unsigned mask, int width, const char* what) const {
  const int lanes = WarpLanes(current_ / kWarp);
  const unsigned full = lanes == kWarp ? 0xffffffffu : ((1u << lanes) - 1);
  if (mask != full) Fault(std::string(what) + " with a partial lane mask, which the emulator does not model");
  if (width != kWarp) Fault(std::string(what) + " narrower than the warp, which the emulator does not model");
}

// Two slot sets, alternating per lane: a lane that has gone on to its next shuffle writes the other
// set, so one barrier per shuffle suffices (no lane can be two shuffles ahead of a slower one).
uint64_t BlockExec::Shuffle(unsigned mask, uint64_t bits, ::lpemu::Shuffle kind, int arg, int width, const char* what) {
  CheckWarpOp(mask, width, what);
  const int f = current_, warp = f / kWarp, lane = f % kWarp, lanes = WarpLanes(warp);
  uint64_t* slots = &slots_[(size_t{parity_[f]} * warps_ + warp) * kWarp];
  parity_[f] ^= 1;
  slots[lane] = bits;
  WarpWait();
  int src = lane;
  switch (kind) {
    case ::lpemu::Shuffle::kIndexed: src = arg & (kWarp - 1); break;
    case ::lpemu::Shuffle::kXor: src = lane ^ arg; break;
    case ::lpemu::Shuffle::kDown: src = lane + arg; break;
    case ::lpemu::Shuffle::kUp: src = lane - arg; break;
  }
  if (src < 0 || src >= lanes) src = lane;
  return slots[src];
}

}  // namespace

const ThreadCoords& CurrentThread() { return Exec().coords(); }
void BlockBarrier() { Exec().BlockWait(); }
void SyncWarp(unsigned mask) {
  Exec().CheckWarpOp(mask, kWarp, "__syncwarp");
  Exec().WarpWait();
}
uint64_t WarpShuffle(unsigned mask, uint64_t bits, Shuffle kind, int arg, int width, const char* what) {
  return Exec().Shuffle(mask, bits, kind, arg, width, what);
}
void* DynamicShared() { return Exec().dynamic_shared(); }
void KernelFault(const char* what) { Exec().Fault(what); }
const char* RunningKernelName() { return tls_exec != nullptr ? tls_exec->kernel_name() : nullptr; }

void RunGrid(const KernelLaunch& launch) {
  const uint64_t threads = uint64_t{launch.block.x} * launch.block.y * launch.block.z;
  if (threads == 0 || threads > kMaxThreadsPerBlock) {
    std::fprintf(stderr, "CUDA emulator: %s launched with %llu threads per block\n", launch.name,
                 static_cast<unsigned long long>(threads));
    std::abort();
  }
  Exec().Run(launch);
}

}  // namespace lpemu
