#ifndef LAYERPIPE_CLI_NPY_H_
#define LAYERPIPE_CLI_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace layerpipe::cli {

// Writes a little-endian float32 .npy array (format version 1.0).
absl::Status WriteNpyF32(const std::string& path, const std::vector<int64_t>& shape, const float* data);

}  // namespace layerpipe::cli

#endif  // LAYERPIPE_CLI_NPY_H_
