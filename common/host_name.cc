#include "common/host_name.h"

#include <unistd.h>

namespace layerpipe {

std::string LocalHostName(const std::string& fallback) {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return fallback;
  return name;
}

bool IsWildcardHost(absl::string_view host) { return host.empty() || host == "0.0.0.0" || host == "[::]"; }

}  // namespace layerpipe
