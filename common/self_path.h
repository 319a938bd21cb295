// The running executable and the programs installed next to it (the servers, the CLI and the CUDA plugin
// ship in one bin/ folder, so each finds the others there first).
#ifndef LAYERPIPE_COMMON_SELF_PATH_H_
#define LAYERPIPE_COMMON_SELF_PATH_H_

#include <filesystem>
#include <string>

#include "absl/status/statusor.h"

namespace layerpipe {

// /proc/self/exe, resolved.
absl::StatusOr<std::filesystem::path> SelfPath();

// `name` in the executable's own folder; NOT_FOUND (saying where it looked) unless it is there and
// executable.
absl::StatusOr<std::string> SiblingExecutable(const std::string& name);

// The folder file `name` would have next to the executable ("" when /proc/self/exe cannot be read).
std::string SiblingPath(const std::string& name);

}  // namespace layerpipe

#endif  // LAYERPIPE_COMMON_SELF_PATH_H_
