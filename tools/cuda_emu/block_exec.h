// Runs a kernel grid on the host: every block's threads as fibers on one host thread, switched at the
// barriers (__syncthreads, __syncwarp, the warp shuffles). Between two barriers the threads run one
// after another, in an order that alternates between ascending and descending thread index from one
// barrier phase to the next, so code that reads another thread's shared-memory write without a barrier
// in between sees a stale value in one of the two orders.
//
// Misuse that a GPU would turn into a hang or undefined behaviour stops the process with a report
// naming the kernel and block: a barrier some threads of the block never reach, a warp operation
// some lanes of the warp never reach, a partial lane mask, more than 1024 threads per block, a grid
// dimension out of range, dynamic shared memory beyond what cudaFuncSetAttribute allowed.
#ifndef LAYERPIPE_TOOLS_CUDA_EMU_BLOCK_EXEC_H_
#define LAYERPIPE_TOOLS_CUDA_EMU_BLOCK_EXEC_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>

namespace lpemu {

struct ThreadCoords {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

// The running emulated thread's coordinates (valid only inside a kernel).
const ThreadCoords& CurrentThread();

void BlockBarrier();
// __syncwarp: the lanes of the running thread's warp meet.
void SyncWarp(unsigned mask);

enum class Shuffle { kIndexed, kXor, kDown, kUp };
// A warp shuffle of a value's bits: every lane of the warp publishes its own and gets lane
// src's, where src is `arg` (kIndexed), lane ^ arg, lane + arg or lane - arg; a source outside the
// warp leaves the lane its own value.
uint64_t WarpShuffle(unsigned mask, uint64_t bits, Shuffle kind, int arg, int width, const char* what);

void* DynamicShared();  // the block's dynamic shared memory

// The name of the kernel the calling host thread runs, nullptr when none (for fault reports).
const char* RunningKernelName();

// Stops the process with a report about the running kernel (the emulator's "illegal instruction").
[[noreturn]] void KernelFault(const char* what);

// A launch as the stream executes it: `fn` identifies the kernel (cudaFuncSetAttribute's key), `name` is
// its source text for reports, and `thread_body` runs once per thread.
struct KernelLaunch {
  const char* name;
  const void* fn;
  dim3 grid, block;
  size_t smem;
  std::function<void()> thread_body;
};

// Checks the launch configuration and enqueues the launch on `stream` (runtime_device.cc); a bad
// configuration becomes the thread's last error, as on a GPU.
void SubmitKernel(cudaStream_t stream, KernelLaunch launch);

// Runs a whole grid on the calling host thread (a stream's executor calls this).
void RunGrid(const KernelLaunch& launch);

}  // namespace lpemu

#endif  // LAYERPIPE_TOOLS_CUDA_EMU_BLOCK_EXEC_H_
