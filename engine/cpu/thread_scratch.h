// Per-thread scratch buffers reused from call to call by the CPU kernels (matmul's packed weights and
// activations, attention's packed keys).
#ifndef LAYERPIPE_ENGINE_CPU_THREAD_SCRATCH_H_
#define LAYERPIPE_ENGINE_CPU_THREAD_SCRATCH_H_

#include <cstddef>
#include <cstdlib>
#include <memory>

#include "engine/cpu/kernel_memory.h"

namespace layerpipe {

// One buffer per thread, element type and kSlot (any enumerator: each names a use). Buffers only grow,
// so steady-state calls never allocate. In kernel memory (kernel_memory.h).
template <typename T, auto kSlot>
T* ThreadScratch(size_t count) {
  struct Buffer {
    std::unique_ptr<T[], decltype(&std::free)> data{nullptr, &std::free};
    size_t capacity = 0;
  };
  thread_local Buffer buf;
  if (count > buf.capacity) {
    buf.data.reset(static_cast<T*>(AllocateKernelMemory(count * sizeof(T))));
    buf.capacity = count;
  }
  return buf.data.get();
}

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CPU_THREAD_SCRATCH_H_
