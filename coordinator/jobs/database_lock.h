// One process at a time per job database: two coordinators writing one store would interleave their jobs'
// records and each resubmit the other's unfinished jobs at restart.
#ifndef LAYERPIPE_COORDINATOR_JOBS_DATABASE_LOCK_H_
#define LAYERPIPE_COORDINATOR_JOBS_DATABASE_LOCK_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace layerpipe {

// An exclusive flock(2) on the database file itself, so that whatever opens the file (a copy of the
// directory, a second coordinator) meets it, and the kernel drops it when the holder dies, kill -9
// included. The holder writes who it is (pid, host, since when) to "<database>.owner" for the refusal to
// name. flock and SQLite's own fcntl locks do not interact on Linux.
class DatabaseLock {
 public:
  // FailedPrecondition naming the holder when another open file description holds the lock (another
  // process, or another store in this one).
  static absl::StatusOr<DatabaseLock> Acquire(const std::string& database);

  DatabaseLock(DatabaseLock&& other) noexcept : database_(std::move(other.database_)), fd_(other.fd_) { other.fd_ = -1; }
  DatabaseLock& operator=(DatabaseLock&&) = delete;
  DatabaseLock(const DatabaseLock&) = delete;
  // Removes the owner file and closes the descriptor, which releases the lock. Closing any descriptor of a file also drops the
  // process's fcntl locks on it, so SQLite's connection to the database must be closed first.
  ~DatabaseLock();

 private:
  DatabaseLock(std::string database, int fd) : database_(std::move(database)), fd_(fd) {}
  std::string database_;
  int fd_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_JOBS_DATABASE_LOCK_H_
