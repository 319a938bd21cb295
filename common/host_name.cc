#include "common/host_name.h"

#include <unistd.h>

namespace layerpipe {

std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return address;
  // "[::1]" alone has colons but no port.
  const size_t bracket = address.rfind(']');
  if (bracket != std::string::npos && bracket > colon) return address;
  return address.substr(0, colon);
}

std::string LocalHostName(const std::string& fallback) {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return fallback;
  return name;
}

bool IsWildcardHost(absl::string_view host) { return host.empty() || host == "0.0.0.0" || host == "[::]"; }

}  // namespace layerpipe
