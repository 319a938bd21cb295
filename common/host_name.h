// What a server tells others to dial: its listen host unless that is a wildcard, then a real name.
#ifndef LAYERPIPE_COMMON_HOST_NAME_H_
#define LAYERPIPE_COMMON_HOST_NAME_H_

#include <string>

#include "absl/strings/string_view.h"

namespace layerpipe {

// "host:port" → "host"; "[::1]:0" → "[::1]". The whole string when it has no port.
std::string HostOf(const std::string& address);

// This machine's host name (gethostname); `fallback` when it has none.
std::string LocalHostName(const std::string& fallback = "127.0.0.1");

// True for the hosts of a listen address that mean "every interface": 0.0.0.0, [::] and empty.
bool IsWildcardHost(absl::string_view host);

}  // namespace layerpipe

#endif  // LAYERPIPE_COMMON_HOST_NAME_H_
