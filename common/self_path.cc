#include "common/self_path.h"

#include <unistd.h>

#include <system_error>

#include "absl/strings/str_cat.h"

namespace layerpipe {

absl::StatusOr<std::filesystem::path> SelfPath() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return absl::InternalError(absl::StrCat("/proc/self/exe: ", ec.message()));
  return self;
}

std::string SiblingPath(const std::string& name) {
  auto self = SelfPath();
  return self.ok() ? (self->parent_path() / name).string() : std::string();
}

absl::StatusOr<std::string> SiblingExecutable(const std::string& name) {
  auto self = SelfPath();
  if (!self.ok()) return self.status();
  const std::filesystem::path p = self->parent_path() / name;
  if (access(p.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(p.string(), " is missing or not executable (build it next to ",
                                            self->filename().string(), ")"));
  }
  return p.string();
}

}  // namespace layerpipe
