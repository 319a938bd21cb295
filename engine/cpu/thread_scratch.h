// Per-thread scratch buffers reused from call to call by the CPU kernels (matmul's packed weights and
// activations, attention's packed keys).
#ifndef LAYERPIPE_ENGINE_CPU_THREAD_SCRATCH_H_
#define LAYERPIPE_ENGINE_CPU_THREAD_SCRATCH_H_

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

namespace layerpipe {

// One buffer per thread, element type and kSlot (any enumerator: each names a use). Buffers only grow,
// so steady-state calls never allocate. Aligned to 64 bytes: rows padded to whole vectors then never
// split a vector load across cache lines.
template <typename T, auto kSlot>
T* ThreadScratch(size_t count) {
  struct Buffer {
    std::unique_ptr<T[], decltype(&std::free)> data{nullptr, &std::free};
    size_t capacity = 0;
  };
  thread_local Buffer buf;
  if (count > buf.capacity) {
    const size_t bytes = (count * sizeof(T) + 63) / 64 * 64;
    buf.data.reset(static_cast<T*>(std::aligned_alloc(64, bytes)));
    if (buf.data == nullptr) {
      buf.capacity = 0;
      throw std::bad_alloc();
    }
    buf.capacity = bytes / sizeof(T);
  }
  return buf.data.get();
}

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CPU_THREAD_SCRATCH_H_
