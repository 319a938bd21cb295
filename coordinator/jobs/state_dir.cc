#include "coordinator/jobs/state_dir.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace layerpipe {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

std::string HomeDir() {
  if (std::string home = Env("HOME"); !home.empty()) return home;
  // A service started without HOME (some init systems) still has a passwd entry.
  if (const passwd* pw = getpwuid(getuid()); pw != nullptr && pw->pw_dir != nullptr) return pw->pw_dir;
  return "";
}

}  // namespace

std::string DefaultStateDir() {
  if (std::string dir = Env("LAYERPIPE_STATE_DIR"); !dir.empty()) return dir;
  if (std::string xdg = Env("XDG_STATE_HOME"); !xdg.empty()) return (std::filesystem::path(xdg) / "layerpipe").string();
  std::string home = HomeDir();
  if (home.empty()) return "";
  return (std::filesystem::path(home) / ".local" / "state" / "layerpipe").string();
}

absl::Status MakeStateDir(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("the state directory is empty");
  std::filesystem::path path(dir);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return absl::OkStatus();
  if (std::filesystem::path parent = path.parent_path(); !parent.empty()) {
    std::filesystem::create_directories(parent, ec);
    if (ec) return absl::FailedPreconditionError(absl::StrCat("cannot create directory ", parent.string(), ": ", ec.message()));
  }
  // mkdir applies the umask too, which can only take bits away from 0700.
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(absl::StrCat("cannot create directory ", dir, ": ", std::strerror(errno)));
  }
  if (!std::filesystem::is_directory(path, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " exists and is not a directory"));
  }
  return absl::OkStatus();
}

}  // namespace layerpipe
