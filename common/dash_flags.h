// absl flags are C identifiers, while the documented spelling of the servers' flags uses dashes
// (--kv-budget, --layer-split). Servers run their argv through this before absl::ParseCommandLine, so
// both spellings work.
#ifndef LAYERPIPE_COMMON_DASH_FLAGS_H_
#define LAYERPIPE_COMMON_DASH_FLAGS_H_

#include <string>
#include <vector>

namespace layerpipe {

// argv with dashes in flag names (not in values, not after "--") turned into underscores.
inline std::vector<std::string> DashesToUnderscores(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& a = args[i];
    if (a == "--") break;
    if (a.rfind("--", 0) != 0) continue;
    const size_t end = a.find('=') == std::string::npos ? a.size() : a.find('=');
    for (size_t j = 2; j < end; ++j) {
      if (a[j] == '-') a[j] = '_';
    }
  }
  return args;
}

// Pointers into `args` for absl::ParseCommandLine.
inline std::vector<char*> ArgPointers(std::vector<std::string>& args) {
  std::vector<char*> ptrs;
  for (std::string& a : args) ptrs.push_back(a.data());
  return ptrs;
}

}  // namespace layerpipe

#endif  // LAYERPIPE_COMMON_DASH_FLAGS_H_
