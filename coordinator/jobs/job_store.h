// Durable storage of submitted jobs, so that they survive a coordinator restart: one SQLite database per
// store. The store knows nothing of the protos: the request and each generated token are opaque blobs the
// caller serialises.
#ifndef LAYERPIPE_COORDINATOR_JOBS_JOB_STORE_H_
#define LAYERPIPE_COORDINATOR_JOBS_JOB_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/jobs/database_lock.h"

struct sqlite3;
struct sqlite3_stmt;

namespace layerpipe {

// The numbers are stored: never renumber.
enum class StoredJobState { kQueued = 1, kPrefilling = 2, kDecoding = 3, kSucceeded = 4, kFailed = 5, kCancelled = 6 };
bool IsFinal(StoredJobState s);  // succeeded/failed/cancelled

struct StoredJob {
  std::string job_id;
  // Submission order, assigned by Insert (1, 2, ...); never reused, also across reopen and after deletions.
  int64_t seq = 0;
  std::string owner;    // client name, may be empty
  std::string request;  // opaque blob (a serialised proto), may contain NUL bytes
  int64_t prompt_tokens = 0;
  StoredJobState state = StoredJobState::kQueued;
  int64_t prefilled = 0;
  std::string finish_reason, error;
  int64_t created_unix_ms = 0, finished_unix_ms = 0;  // 0: not finished
  std::vector<std::string> tokens;  // opaque per generated token, index = position among generated tokens
  int64_t generated = 0;            // how many tokens are stored (List fills it, and not `tokens`)
};

// A page of jobs, newest first.
struct JobQuery {
  std::optional<StoredJobState> state;  // only jobs in this state
  std::optional<std::string> owner;     // only jobs of this owner, and those without one; unset: everyone's
  int64_t before_seq = 0;               // only jobs submitted before this one (0: from the newest)
  int64_t limit = 100;
};

struct JobProgress {  // what UpdateProgress writes
  StoredJobState state;
  int64_t prefilled = 0;
  std::string finish_reason, error;
  int64_t finished_unix_ms = 0;
};

// Thread-safe: the coordinator calls from several threads, and one connection is shared under a mutex.
class JobStore {
 public:
  // Opens (creating when absent) `<dir>/jobs.sqlite3`; creates `dir` (0700) if needed. Journal WAL,
  // synchronous NORMAL: a commit survives the process being killed (kill -9), not necessarily a power loss.
  // Refuses with FailedPrecondition, leaving the file untouched, a database another store holds (another
  // coordinator: the message names it, database_lock.h), a file that is not an SQLite database, an SQLite
  // database that is not a layerpipe job store, and a job store of another schema version.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& dir);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Adds a new job (tokens must be empty); fills job->seq. AlreadyExists if the id was ever issued, even
  // when that job has since been deleted: ids are never reissued.
  absl::Status Insert(StoredJob* job);
  // Appends tokens [first_index, first_index + tokens.size()); rows already present are left as they are, so
  // a retry after a failure is harmless. A gap (first_index > stored count) is InvalidArgument; an unknown
  // job NotFound.
  absl::Status AppendTokens(const std::string& job_id, int64_t first_index, const std::vector<std::string>& tokens);
  absl::Status UpdateProgress(const std::string& job_id, const JobProgress& progress);  // NotFound for unknown
  // Every job with its tokens, in seq order.
  absl::StatusOr<std::vector<StoredJob>> LoadAll();
  // The jobs that have not ended, with their tokens, in seq order: what a restart resumes.
  absl::StatusOr<std::vector<StoredJob>> LoadUnfinished();
  // One job with its tokens; NotFound for an id that is not (or no longer) stored.
  absl::StatusOr<StoredJob> LoadJob(const std::string& job_id);
  // A page of `query`, without requests and tokens (`generated` counts them).
  absl::StatusOr<std::vector<StoredJob>> List(const JobQuery& query);
  // Deletes final jobs whose finished_unix_ms < cutoff (and their tokens), oldest first, `batch` jobs per
  // transaction, at most `max_batches` transactions (-1: until none is left); returns how many.
  absl::StatusOr<int64_t> DeleteFinishedBefore(int64_t cutoff_unix_ms, int64_t batch = 1000, int64_t max_batches = -1);
  // Whether `job_id` was ever issued.
  absl::StatusOr<bool> WasIssued(const std::string& job_id);

 private:
  class Statement;
  class Transaction;

  JobStore(std::string path, sqlite3* db, DatabaseLock lock)
      : path_(std::move(path)), lock_(std::move(lock)), db_(db) {}
  // Checks that the database is an empty one (and gives it the schema) or a job store of our version (or
  // of version 1, which it upgrades).
  absl::Status Adopt();
  // The JOB_COLUMNS of a row (job_store.cc) into `job`.
  absl::Status ReadJob(const Statement& st, StoredJob* job) const;
  // Jobs of `jobs_sql` (JOB_COLUMNS then request) with the tokens of `tokens_sql` (job_id, data); mu_ held.
  absl::StatusOr<std::vector<StoredJob>> Load(const char* jobs_sql, const char* tokens_sql);
  // Prepared once and kept, handed out reset and unbound: the same SQL must not be prepared again while its
  // Statement is alive.
  absl::StatusOr<Statement> Prepare(const char* sql);
  absl::Status Exec(const char* sql);
  // `rc` and sqlite's message for the last failure as an absl error naming the file.
  absl::Status Error(int rc, const std::string& what) const;
  absl::Status Refuse(const std::string& why) const;

  const std::string path_;
  // Declared before db_'s users and destroyed after the destructor has closed the connection: releasing
  // it first would drop SQLite's own locks on the file (database_lock.h).
  DatabaseLock lock_;
  // Serialises all use of the connection: it is opened without sqlite's own locking.
  std::mutex mu_;
  sqlite3* const db_;
  std::map<std::string, sqlite3_stmt*, std::less<>> statements_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_JOBS_JOB_STORE_H_
