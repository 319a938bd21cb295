// Memory for the CPU kernels' activations and scratch buffers. 64-byte aligned, so rows padded to
// whole vectors never split a vector load across cache lines; from 2 MiB up also 2 MiB aligned and
// advised to use transparent huge pages: a prefill chunk's activations span 8-60 MB whose rows the
// kernels read and write thousands of bytes apart, and in 4 KiB pages every row tile walks new TLB
// entries (with x and y in huge pages, 4096-row GEMMs ran 10-20 % faster on a 2-core Zen 5 VM).
#ifndef LAYERPIPE_ENGINE_CPU_KERNEL_MEMORY_H_
#define LAYERPIPE_ENGINE_CPU_KERNEL_MEMORY_H_

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>

#include "engine/model/huge_pages.h"

namespace layerpipe {

// At least `bytes` (rounded up to the alignment); throws std::bad_alloc when out of memory. Release
// with std::free.
inline void* AllocateKernelMemory(size_t bytes) {
  const size_t align = bytes >= kHugePageBytes ? kHugePageBytes : 64;
  const size_t size = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, size == 0 ? align : size);
  if (p == nullptr) throw std::bad_alloc();
  // Refused where THP is off; the memory still works, in small pages.
  if (align == kHugePageBytes) madvise(p, size, MADV_HUGEPAGE);
  return p;
}

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CPU_KERNEL_MEMORY_H_
