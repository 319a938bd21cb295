#include "coordinator/jobs/database_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace layerpipe {
namespace {

std::string OwnerPath(const std::string& database) { return database + ".owner"; }

std::string WhoWeAre() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  return absl::StrCat("pid ", getpid(), " on host ", host, ", since ",
                      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone()));
}

// Written beside the database and renamed into place, so that a reader sees a whole line or the last one.
void WriteOwner(const std::string& database) {
  const std::string path = OwnerPath(database), tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << WhoWeAre() << "\n";
    if (!out) return;  // the lock holds without it; only the refusal's message is poorer
  }
  std::rename(tmp.c_str(), path.c_str());
}

std::string Holder(const std::string& database) {
  std::ifstream in(OwnerPath(database));
  std::stringstream text;
  text << in.rdbuf();
  std::string who(absl::StripAsciiWhitespace(text.str()));
  return who.empty() ? "a process that did not say who it is" : who;
}

}  // namespace

absl::StatusOr<DatabaseLock> DatabaseLock::Acquire(const std::string& database) {
  const int fd = open(database.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return absl::FailedPreconditionError(absl::StrCat("cannot open ", database, ": ", std::strerror(errno)));
  int rc;
  do rc = flock(fd, LOCK_EX | LOCK_NB);
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int error = errno;
    close(fd);  // not a DatabaseLock: its destructor would remove the holder's owner file
    if (error != EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat("cannot lock ", database, ": ", std::strerror(error)));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        database, " is in use by another coordinator (", Holder(database),
        "): two coordinators must not share a state directory; stop that one, or give this one its own --state-dir"));
  }
  WriteOwner(database);
  return DatabaseLock(database, fd);
}

DatabaseLock::~DatabaseLock() {
  if (fd_ < 0) return;
  // Still under the lock, so no other holder's line is removed. After a kill -9 the stale line stays until
  // the next holder overwrites it.
  std::remove(OwnerPath(database_).c_str());
  close(fd_);
}

}  // namespace layerpipe
