// Vectors in kernel memory (kernel_memory.h: starts on a cache line, huge pages from 2 MiB up), for the
// CPU kernels' inputs and outputs.
#ifndef LAYERPIPE_ENGINE_CPU_ALIGNED_VECTOR_H_
#define LAYERPIPE_ENGINE_CPU_ALIGNED_VECTOR_H_

#include <cstddef>
#include <cstdlib>
#include <vector>

#include "engine/cpu/kernel_memory.h"

namespace layerpipe {

template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}  // NOLINT: rebinding, as allocators do

  T* allocate(size_t n) { return static_cast<T*>(AllocateKernelMemory(n * sizeof(T))); }
  void deallocate(T* p, size_t) { std::free(p); }

  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
};

template <typename T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CPU_ALIGNED_VECTOR_H_
