// What the emulator's libraries (cuBLASLt) share with its runtime: enqueueing work on a stream, which
// a capture records into its graph instead.
#ifndef LAYERPIPE_TOOLS_CUDA_EMU_RUNTIME_INTERNAL_H_
#define LAYERPIPE_TOOLS_CUDA_EMU_RUNTIME_INTERNAL_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>

namespace lpemu {

using Op = std::function<void()>;

// The stream a handle names (0, cudaStreamLegacy and cudaStreamPerThread: the default stream).
CUstream_st* StreamOf(cudaStream_t stream);

// Appends `op` to the stream's queue (or to its capture); returns its position in the queue, 0 when
// captured.
uint64_t Enqueue(CUstream_st* stream, Op op);

// Whether [p, p + bytes) lies inside one live device allocation.
bool InsideDeviceAllocation(const void* p, size_t bytes);

}  // namespace lpemu

#endif  // LAYERPIPE_TOOLS_CUDA_EMU_RUNTIME_INTERNAL_H_
