#include "engine/model/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace layerpipe {
namespace {

size_t RoundUp(size_t v, size_t m) { return (v + m - 1) / m * m; }

}  // namespace

absl::StatusOr<std::unique_ptr<HugePageBuffer>> HugePageBuffer::Allocate(size_t bytes) {
  const size_t size = RoundUp(std::max<size_t>(bytes, 1), kHugePageBytes);
  // Over-allocate by one huge page and trim, so the buffer starts on a 2 MiB boundary (a huge page can
  // only back an aligned 2 MiB range).
  void* raw = mmap(nullptr, size + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", size, " bytes for the weights: ", std::strerror(errno)));
  }
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = RoundUp(begin, kHugePageBytes);
  if (aligned > begin) munmap(raw, aligned - begin);
  const uintptr_t end = begin + size + kHugePageBytes;
  if (end > aligned + size) munmap(reinterpret_cast<void*>(aligned + size), end - aligned - size);
  auto* data = reinterpret_cast<uint8_t*>(aligned);
  madvise(data, size, MADV_HUGEPAGE);  // refused where THP is off: the copy still works, in small pages
  return std::unique_ptr<HugePageBuffer>(new HugePageBuffer(data, size));
}

HugePageBuffer::~HugePageBuffer() { munmap(data_, size_); }

std::vector<std::string> SmapsFields(const std::function<bool(uintptr_t lo, uintptr_t hi)>& take) {
  std::ifstream smaps("/proc/self/smaps");
  std::vector<std::string> fields;
  bool taken = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      taken = take(lo, hi);  // a mapping's first line
      continue;
    }
    if (taken) fields.push_back(line);
  }
  return fields;
}

size_t HugePageBuffer::huge_bytes() const {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data_), end = begin + size_;
  size_t huge = 0;
  // The kernel may have split the mapping in several.
  for (const std::string& line : SmapsFields([&](uintptr_t lo, uintptr_t hi) { return lo >= begin && hi <= end; })) {
    if (line.rfind("AnonHugePages:", 0) != 0) continue;
    size_t kb = 0;
    std::istringstream(line.substr(14)) >> kb;
    huge += kb * 1024;
  }
  return huge;
}

}  // namespace layerpipe
