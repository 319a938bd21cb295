// Vectors whose storage starts on a cache line, for the CPU kernels' inputs and outputs: rows whose
// width is a whole number of 64-byte vectors then never split a vector load across two lines.
#ifndef LAYERPIPE_ENGINE_CPU_ALIGNED_VECTOR_H_
#define LAYERPIPE_ENGINE_CPU_ALIGNED_VECTOR_H_

#include <cstddef>
#include <new>
#include <vector>

namespace layerpipe {

template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{64};

  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}  // NOLINT: rebinding, as allocators do

  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlignment)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlignment); }

  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
};

template <typename T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CPU_ALIGNED_VECTOR_H_
