// The project's version (project(VERSION) in the top-level CMakeLists.txt) and the git commit the build
// was configured from: what every program's --version prints.
#ifndef LAYERPIPE_COMMON_VERSION_H_
#define LAYERPIPE_COMMON_VERSION_H_

#include <string>

#include "absl/strings/string_view.h"

namespace layerpipe {

const char* Version();    // "0.1.0"
const char* GitCommit();  // short hash, or "unknown" outside a git checkout

// "PROGRAM 0.1.0 (git 1a2b3c4)".
std::string VersionLine(absl::string_view program);

}  // namespace layerpipe

#endif  // LAYERPIPE_COMMON_VERSION_H_
