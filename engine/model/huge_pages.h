// Anonymous memory for the weights a CPU stage reads, backed by transparent huge pages where the kernel
// allows (madvise(MADV_HUGEPAGE); THP "always" or "madvise"). A matmul streams every weight once per
// step: with 4 KiB pages each core walks a TLB entry per page, and 2 MiB pages raised the bandwidth one
// core draws from weights by 25-30 % on the machines this was measured on. The price is one copy at load.
#ifndef LAYERPIPE_ENGINE_MODEL_HUGE_PAGES_H_
#define LAYERPIPE_ENGINE_MODEL_HUGE_PAGES_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace layerpipe {

// The transparent huge page size of x86-64.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// The field lines ("AnonHugePages:  2048 kB", "VmFlags: rd wr mr mw me ac hg", ..) of the mappings in
// /proc/self/smaps whose address range [lo, hi) `take` accepts: what the kernel did with memory it was
// advised about.
std::vector<std::string> SmapsFields(const std::function<bool(uintptr_t lo, uintptr_t hi)>& take);

class HugePageBuffer {
 public:
  // `bytes` of zeroed memory, 2 MiB aligned, advised to use huge pages (advice the kernel may ignore).
  static absl::StatusOr<std::unique_ptr<HugePageBuffer>> Allocate(size_t bytes);
  ~HugePageBuffer();
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // How much of it the kernel backs with huge pages now (AnonHugePages of its mapping).
  size_t huge_bytes() const;

 private:
  HugePageBuffer(uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t* data_;
  size_t size_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_MODEL_HUGE_PAGES_H_
