// Memory sizes on the command line ("8G", "512M", "1048576") and the worker's default KV budget.
#ifndef LAYERPIPE_WORKER_BYTE_SIZE_H_
#define LAYERPIPE_WORKER_BYTE_SIZE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace layerpipe {

// A positive integer with an optional binary suffix K, M, G or T (also KiB/KB, MiB/MB, ...; any case):
// "8G" = 8 << 30. InvalidArgument for anything else, zero, or a value that does not fit in int64.
absl::StatusOr<int64_t> ParseByteSize(const std::string& text);

// A size (as ParseByteSize, or "0") or a share of something else ("50%", 0-100).
struct SizeOrShare {
  int64_t bytes = 0;
  double share = -1;  // >= 0: a share (0-1), and `bytes` is unused
};
absl::StatusOr<SizeOrShare> ParseSizeOrShare(const std::string& text);

// Half of the machine's physical memory: the KV budget when none is given.
int64_t DefaultKvBudgetBytes();

}  // namespace layerpipe

#endif  // LAYERPIPE_WORKER_BYTE_SIZE_H_
