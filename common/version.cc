#include "common/version.h"

#include "absl/strings/str_cat.h"

// Defined for this file only (common/CMakeLists.txt), so a new commit recompiles nothing else.
#ifndef LAYERPIPE_VERSION
#define LAYERPIPE_VERSION "unknown"
#endif
#ifndef LAYERPIPE_GIT_COMMIT
#define LAYERPIPE_GIT_COMMIT "unknown"
#endif

namespace layerpipe {

const char* Version() { return LAYERPIPE_VERSION; }
const char* GitCommit() { return LAYERPIPE_GIT_COMMIT; }

std::string VersionLine(absl::string_view program) {
  return absl::StrCat(program, " ", Version(), " (git ", GitCommit(), ")");
}

}  // namespace layerpipe
