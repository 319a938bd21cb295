#include "coordinator/jobs/job_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <limits>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/jobs/state_dir.h"

#define JOB_STORE_RETURN_IF_ERROR(expr)               \
  do {                                                \
    if (absl::Status _js_st = (expr); !_js_st.ok()) { \
      return _js_st;                                  \
    }                                                 \
  } while (0)

namespace layerpipe {
namespace {

constexpr char kFileName[] = "jobs.sqlite3";
constexpr char kApplication[] = "layerpipe-jobs";
// 2 added the listing and retention indexes (Indexes()); a version 1 store is given them at open.
constexpr char kSchemaVersion[] = "2";
// Long enough to ride out another process's write transaction (they are short), short enough to report a
// store that is stuck.
constexpr int kBusyTimeoutMs = 10000;

constexpr const char* kOurTables[] = {"meta", "issued_ids", "jobs", "job_tokens"};

// The SQL below spells the final states as (4, 5, 6).
static_assert(static_cast<int>(StoredJobState::kSucceeded) == 4 && static_cast<int>(StoredJobState::kFailed) == 5 &&
              static_cast<int>(StoredJobState::kCancelled) == 6);

// A page of one state newest first, the unfinished jobs at start, and retention's oldest finished jobs,
// each without scanning the whole table.
std::string Indexes() {
  return "CREATE INDEX jobs_by_state ON jobs (state, seq);"
         "CREATE INDEX jobs_finished ON jobs (finished_unix_ms) WHERE state IN (4, 5, 6);";
}

std::string Schema() {
  return absl::StrCat(
      "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
      // Never deleted from: an id is issued once, and seq (the rowid) only grows.
      "CREATE TABLE issued_ids (seq INTEGER PRIMARY KEY, job_id TEXT NOT NULL UNIQUE);"
      "CREATE TABLE jobs (seq INTEGER PRIMARY KEY, job_id TEXT NOT NULL UNIQUE, owner TEXT NOT NULL,"
      " request BLOB NOT NULL, prompt_tokens INTEGER NOT NULL, state INTEGER NOT NULL,"
      " prefilled INTEGER NOT NULL, finish_reason TEXT NOT NULL, error TEXT NOT NULL,"
      " created_unix_ms INTEGER NOT NULL, finished_unix_ms INTEGER NOT NULL);"
      "CREATE TABLE job_tokens (job_id TEXT NOT NULL, idx INTEGER NOT NULL, data BLOB NOT NULL,"
      " PRIMARY KEY (job_id, idx)) WITHOUT ROWID;",
      Indexes(),
      "INSERT INTO meta VALUES ('application', '",
      kApplication, "'), ('schema_version', '", kSchemaVersion, "');");
}

// The columns ReadJob reads, in its order.
#define JOB_COLUMNS                                                                                          \
  "seq, job_id, owner, prompt_tokens, state, prefilled, finish_reason, error, created_unix_ms, finished_unix_ms," \
  " (SELECT COUNT(*) FROM job_tokens t WHERE t.job_id = jobs.job_id)"

}  // namespace

bool IsFinal(StoredJobState s) {
  return s == StoredJobState::kSucceeded || s == StoredJobState::kFailed || s == StoredJobState::kCancelled;
}

// Parameters are bound in order. Resets the statement when it goes, so that no SELECT keeps a read snapshot
// open between calls (which would also hold back WAL checkpoints).
class JobStore::Statement {
 public:
  explicit Statement(sqlite3_stmt* stmt) : stmt_(stmt) {}
  Statement(Statement&& other) noexcept
      : stmt_(std::exchange(other.stmt_, nullptr)), next_(other.next_), bind_rc_(other.bind_rc_) {}
  Statement& operator=(Statement&&) = delete;
  ~Statement() {
    if (stmt_ == nullptr) return;
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

  // The values must outlive the statement: sqlite keeps pointers to them.
  Statement& BindInt(int64_t v) { return Note(sqlite3_bind_int64(stmt_, next_++, v)); }
  Statement& BindText(const std::string& v) {
    return Note(sqlite3_bind_text64(stmt_, next_++, v.data(), v.size(), SQLITE_STATIC, SQLITE_UTF8));
  }
  Statement& BindBlob(const std::string& v) {
    return Note(sqlite3_bind_blob64(stmt_, next_++, v.data(), v.size(), SQLITE_STATIC));
  }
  // SQLITE_ROW, SQLITE_DONE or the error, a failed bind's included.
  int Step() { return bind_rc_ != SQLITE_OK ? bind_rc_ : sqlite3_step(stmt_); }

  bool IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  // TEXT and BLOB alike, byte for byte (NUL bytes included).
  std::string Bytes(int col) const {
    const void* data = sqlite3_column_blob(stmt_, col);
    const int size = sqlite3_column_bytes(stmt_, col);
    return data == nullptr ? std::string() : std::string(static_cast<const char*>(data), size);
  }

 private:
  Statement& Note(int rc) {
    if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
    return *this;
  }

  sqlite3_stmt* stmt_;
  int next_ = 1;
  int bind_rc_ = SQLITE_OK;
};

// Rolls back unless committed, so that an early return leaves the database as it was.
class JobStore::Transaction {
 public:
  explicit Transaction(JobStore* store) : store_(store) {}
  ~Transaction() {
    if (open_) sqlite3_exec(store_->db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  // Writers begin IMMEDIATE: taking the write lock up front, they wait for another process's writer (the
  // busy timeout) instead of failing half way.
  absl::Status Begin(const char* begin = "BEGIN IMMEDIATE") {
    JOB_STORE_RETURN_IF_ERROR(store_->Exec(begin));
    open_ = true;
    return absl::OkStatus();
  }
  absl::Status Commit() {
    JOB_STORE_RETURN_IF_ERROR(store_->Exec("COMMIT"));
    open_ = false;
    return absl::OkStatus();
  }

 private:
  JobStore* store_;
  bool open_ = false;
};

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& dir) {
  JOB_STORE_RETURN_IF_ERROR(MakeStateDir(dir));
  std::string path = (std::filesystem::path(dir) / kFileName).string();
  // Before SQLite touches the file: a second coordinator must not even open it.
  absl::StatusOr<DatabaseLock> lock = DatabaseLock::Acquire(path);
  if (!lock.ok()) return lock.status();
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (db == nullptr) return absl::ResourceExhaustedError(absl::StrCat(path, ": sqlite cannot allocate a connection"));
  // Owns (and on any refusal closes) the connection from here on.
  std::unique_ptr<JobStore> store(new JobStore(std::move(path), db, *std::move(lock)));
  if (rc != SQLITE_OK) return store->Error(rc, "cannot open");
  if (int busy_rc = sqlite3_busy_timeout(db, kBusyTimeoutMs); busy_rc != SQLITE_OK) {
    return store->Error(busy_rc, "cannot set the busy timeout");
  }
  JOB_STORE_RETURN_IF_ERROR(store->Adopt());
  // Only after Adopt: switching to WAL rewrites the file header, and a refused database must stay untouched.
  {
    absl::StatusOr<Statement> st = store->Prepare("PRAGMA journal_mode = WAL");
    if (!st.ok()) return st.status();
    const int wal_rc = st->Step();
    if (wal_rc != SQLITE_ROW) return store->Error(wal_rc, "cannot switch to WAL journal mode");
    if (std::string mode = st->Bytes(0); mode != "wal") {
      return absl::FailedPreconditionError(
          absl::StrCat(store->path_, ": cannot switch to WAL journal mode, sqlite stays in '", mode, "'"));
    }
  }
  // With WAL, NORMAL loses nothing when the process dies (the OS has the writes); only a power loss may
  // lose the last commits.
  JOB_STORE_RETURN_IF_ERROR(store->Exec("PRAGMA synchronous = NORMAL"));
  return store;
}

JobStore::~JobStore() {
  for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
  sqlite3_close(db_);
}

absl::Status JobStore::Adopt() {
  Transaction txn(this);
  // Under the write lock, so that two processes opening a new file do not both create the schema. This is
  // also the first read of the file, where one that is not a database fails.
  JOB_STORE_RETURN_IF_ERROR(txn.Begin());
  std::set<std::string> tables;
  {
    absl::StatusOr<Statement> st = Prepare(
        "SELECT name FROM sqlite_schema WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'");
    if (!st.ok()) return st.status();
    int rc;
    while ((rc = st->Step()) == SQLITE_ROW) tables.insert(st->Bytes(0));
    if (rc != SQLITE_DONE) return Error(rc, "cannot read the schema");
  }
  if (tables.empty()) {
    JOB_STORE_RETURN_IF_ERROR(Exec(Schema().c_str()));
    return txn.Commit();
  }
  if (!tables.contains("meta")) {
    return Refuse(
        absl::StrCat("not a layerpipe job store: it has tables ", absl::StrJoin(tables, ", "), " and no meta table"));
  }
  std::map<std::string, std::string> meta;
  {
    // The schema has been read: failing to prepare means a foreign meta table without these columns.
    absl::StatusOr<Statement> st = Prepare("SELECT key, value FROM meta");
    if (!st.ok()) {
      return Refuse(absl::StrCat("not a layerpipe job store: its meta table is not ours (", sqlite3_errmsg(db_), ")"));
    }
    int rc;
    while ((rc = st->Step()) == SQLITE_ROW) meta[st->Bytes(0)] = st->Bytes(1);
    if (rc != SQLITE_DONE) return Error(rc, "cannot read the meta table");
  }
  if (meta["application"] != kApplication) {
    return Refuse(absl::StrCat("not a layerpipe job store: meta has no application '", kApplication, "'"));
  }
  auto version = meta.find("schema_version");
  if (version == meta.end()) return Refuse("a layerpipe job store without a schema_version in meta");
  const bool upgrade = version->second == "1";
  if (!upgrade && version->second != kSchemaVersion) {
    return Refuse(absl::StrCat("a layerpipe job store of schema version '", version->second, "', expected '",
                               kSchemaVersion, "'"));
  }
  std::vector<std::string> foreign, missing;
  for (const std::string& t : tables) {
    if (std::find(std::begin(kOurTables), std::end(kOurTables), t) == std::end(kOurTables)) foreign.push_back(t);
  }
  for (const char* t : kOurTables) {
    if (!tables.contains(t)) missing.push_back(t);
  }
  if (!foreign.empty()) {
    return Refuse(absl::StrCat("a layerpipe job store with foreign tables ", absl::StrJoin(foreign, ", ")));
  }
  if (!missing.empty()) {
    return Refuse(absl::StrCat("a layerpipe job store that lacks tables ", absl::StrJoin(missing, ", ")));
  }
  if (upgrade) {
    JOB_STORE_RETURN_IF_ERROR(Exec(Indexes().c_str()));
    JOB_STORE_RETURN_IF_ERROR(Exec(absl::StrCat("UPDATE meta SET value = '", kSchemaVersion,
                                                "' WHERE key = 'schema_version'").c_str()));
  }
  return txn.Commit();
}

absl::Status JobStore::Insert(StoredJob* job) {
  if (job->job_id.empty()) return absl::InvalidArgumentError("a job needs an id");
  if (!job->tokens.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", job->job_id, " is inserted without tokens; AppendTokens adds them"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  Transaction txn(this);
  JOB_STORE_RETURN_IF_ERROR(txn.Begin());
  {
    absl::StatusOr<Statement> st = Prepare("INSERT INTO issued_ids (job_id) VALUES (?)");
    if (!st.ok()) return st.status();
    const int rc = st->BindText(job->job_id).Step();
    if ((rc & 0xff) == SQLITE_CONSTRAINT) {
      return absl::AlreadyExistsError(absl::StrCat("job id ", job->job_id, " was issued before"));
    }
    if (rc != SQLITE_DONE) return Error(rc, "cannot issue a job id");
  }
  const int64_t seq = sqlite3_last_insert_rowid(db_);
  {
    absl::StatusOr<Statement> st = Prepare(
        "INSERT INTO jobs (seq, job_id, owner, request, prompt_tokens, state, prefilled, finish_reason, error,"
        " created_unix_ms, finished_unix_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    if (!st.ok()) return st.status();
    const int rc = st->BindInt(seq)
                       .BindText(job->job_id)
                       .BindText(job->owner)
                       .BindBlob(job->request)
                       .BindInt(job->prompt_tokens)
                       .BindInt(static_cast<int64_t>(job->state))
                       .BindInt(job->prefilled)
                       .BindText(job->finish_reason)
                       .BindText(job->error)
                       .BindInt(job->created_unix_ms)
                       .BindInt(job->finished_unix_ms)
                       .Step();
    if (rc != SQLITE_DONE) return Error(rc, "cannot insert a job");
  }
  JOB_STORE_RETURN_IF_ERROR(txn.Commit());
  job->seq = seq;
  return absl::OkStatus();
}

absl::Status JobStore::AppendTokens(const std::string& job_id, int64_t first_index,
                                    const std::vector<std::string>& tokens) {
  if (first_index < 0) return absl::InvalidArgumentError(absl::StrCat("negative token index ", first_index));
  std::lock_guard<std::mutex> lock(mu_);
  Transaction txn(this);
  JOB_STORE_RETURN_IF_ERROR(txn.Begin());
  int64_t stored = 0;
  {
    // One row when the job exists: its largest token index, NULL without tokens.
    absl::StatusOr<Statement> st =
        Prepare("SELECT (SELECT MAX(idx) FROM job_tokens WHERE job_id = ?1) FROM jobs WHERE job_id = ?1");
    if (!st.ok()) return st.status();
    const int rc = st->BindText(job_id).Step();
    if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("no job ", job_id));
    if (rc != SQLITE_ROW) return Error(rc, "cannot count tokens");
    stored = st->IsNull(0) ? 0 : st->Int(0) + 1;
  }
  if (first_index > stored) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", job_id, " has ", stored, " tokens; appending at ", first_index, " would leave a gap"));
  }
  for (int64_t index = stored; index < first_index + static_cast<int64_t>(tokens.size()); ++index) {
    absl::StatusOr<Statement> st = Prepare("INSERT INTO job_tokens (job_id, idx, data) VALUES (?, ?, ?)");
    if (!st.ok()) return st.status();
    const int rc = st->BindText(job_id).BindInt(index).BindBlob(tokens[index - first_index]).Step();
    if (rc != SQLITE_DONE) return Error(rc, "cannot append a token");
  }
  return txn.Commit();
}

absl::Status JobStore::UpdateProgress(const std::string& job_id, const JobProgress& progress) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<Statement> st = Prepare(
      "UPDATE jobs SET state = ?, prefilled = ?, finish_reason = ?, error = ?, finished_unix_ms = ? WHERE job_id = ?");
  if (!st.ok()) return st.status();
  const int rc = st->BindInt(static_cast<int64_t>(progress.state))
                     .BindInt(progress.prefilled)
                     .BindText(progress.finish_reason)
                     .BindText(progress.error)
                     .BindInt(progress.finished_unix_ms)
                     .BindText(job_id)
                     .Step();
  if (rc != SQLITE_DONE) return Error(rc, "cannot update a job");
  if (sqlite3_changes(db_) == 0) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  return absl::OkStatus();
}

absl::Status JobStore::ReadJob(const Statement& st, StoredJob* job) const {
  job->seq = st.Int(0);
  job->job_id = st.Bytes(1);
  job->owner = st.Bytes(2);
  job->prompt_tokens = st.Int(3);
  const int64_t state = st.Int(4);
  if (state < static_cast<int64_t>(StoredJobState::kQueued) || state > static_cast<int64_t>(StoredJobState::kCancelled)) {
    return absl::DataLossError(absl::StrCat(path_, ": job ", job->job_id, " has unknown state ", state));
  }
  job->state = static_cast<StoredJobState>(state);
  job->prefilled = st.Int(5);
  job->finish_reason = st.Bytes(6);
  job->error = st.Bytes(7);
  job->created_unix_ms = st.Int(8);
  job->finished_unix_ms = st.Int(9);
  job->generated = st.Int(10);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StoredJob>> JobStore::Load(const char* jobs_sql, const char* tokens_sql) {
  // Both reads in one transaction, so that tokens and jobs are of the same moment.
  Transaction txn(this);
  JOB_STORE_RETURN_IF_ERROR(txn.Begin("BEGIN"));
  std::vector<StoredJob> jobs;
  std::map<std::string, size_t, std::less<>> index_of;
  {
    absl::StatusOr<Statement> st = Prepare(jobs_sql);
    if (!st.ok()) return st.status();
    int rc;
    while ((rc = st->Step()) == SQLITE_ROW) {
      StoredJob& job = jobs.emplace_back();
      JOB_STORE_RETURN_IF_ERROR(ReadJob(*st, &job));
      job.request = st->Bytes(11);
      index_of[job.job_id] = jobs.size() - 1;
    }
    if (rc != SQLITE_DONE) return Error(rc, "cannot read jobs");
  }
  {
    // Index order within a job, and AppendTokens never leaves a gap: the position is the index.
    absl::StatusOr<Statement> st = Prepare(tokens_sql);
    if (!st.ok()) return st.status();
    int rc;
    while ((rc = st->Step()) == SQLITE_ROW) {
      if (auto it = index_of.find(st->Bytes(0)); it != index_of.end()) jobs[it->second].tokens.push_back(st->Bytes(1));
    }
    if (rc != SQLITE_DONE) return Error(rc, "cannot read tokens");
  }
  JOB_STORE_RETURN_IF_ERROR(txn.Commit());
  return jobs;
}

absl::StatusOr<std::vector<StoredJob>> JobStore::LoadAll() {
  std::lock_guard<std::mutex> lock(mu_);
  return Load("SELECT " JOB_COLUMNS ", request FROM jobs ORDER BY seq",
              "SELECT job_id, data FROM job_tokens ORDER BY job_id, idx");
}

absl::StatusOr<std::vector<StoredJob>> JobStore::LoadUnfinished() {
  std::lock_guard<std::mutex> lock(mu_);
  return Load("SELECT " JOB_COLUMNS ", request FROM jobs WHERE state IN (1, 2, 3) ORDER BY seq",
              "SELECT job_id, data FROM job_tokens WHERE job_id IN (SELECT job_id FROM jobs WHERE state IN (1, 2, 3))"
              " ORDER BY job_id, idx");
}

absl::StatusOr<StoredJob> JobStore::LoadJob(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction txn(this);
  JOB_STORE_RETURN_IF_ERROR(txn.Begin("BEGIN"));
  StoredJob job;
  {
    absl::StatusOr<Statement> st = Prepare("SELECT " JOB_COLUMNS ", request FROM jobs WHERE job_id = ?");
    if (!st.ok()) return st.status();
    const int rc = st->BindText(job_id).Step();
    if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("no job ", job_id));
    if (rc != SQLITE_ROW) return Error(rc, "cannot read a job");
    JOB_STORE_RETURN_IF_ERROR(ReadJob(*st, &job));
    job.request = st->Bytes(11);
  }
  {
    absl::StatusOr<Statement> st = Prepare("SELECT data FROM job_tokens WHERE job_id = ? ORDER BY idx");
    if (!st.ok()) return st.status();
    st->BindText(job_id);
    int rc;
    while ((rc = st->Step()) == SQLITE_ROW) job.tokens.push_back(st->Bytes(0));
    if (rc != SQLITE_DONE) return Error(rc, "cannot read tokens");
  }
  JOB_STORE_RETURN_IF_ERROR(txn.Commit());
  return job;
}

absl::StatusOr<std::vector<StoredJob>> JobStore::List(const JobQuery& query) {
  if (query.limit <= 0) return std::vector<StoredJob>();
  std::lock_guard<std::mutex> lock(mu_);
  // Two statements, so that a state's page walks jobs_by_state and the unfiltered one the table's seq.
  absl::StatusOr<Statement> st =
      query.state ? Prepare("SELECT " JOB_COLUMNS " FROM jobs WHERE state = ?1 AND seq < ?2"
                            " AND (?3 OR owner = '' OR owner = ?4) ORDER BY seq DESC LIMIT ?5")
                  : Prepare("SELECT " JOB_COLUMNS " FROM jobs WHERE ?1 = 0 AND seq < ?2"
                            " AND (?3 OR owner = '' OR owner = ?4) ORDER BY seq DESC LIMIT ?5");
  if (!st.ok()) return st.status();
  const int64_t before = query.before_seq > 0 ? query.before_seq : std::numeric_limits<int64_t>::max();
  st->BindInt(query.state ? static_cast<int64_t>(*query.state) : 0)
      .BindInt(before)
      .BindInt(query.owner.has_value() ? 0 : 1)
      .BindText(query.owner.has_value() ? *query.owner : std::string())
      .BindInt(query.limit);
  std::vector<StoredJob> jobs;
  int rc;
  while ((rc = st->Step()) == SQLITE_ROW) JOB_STORE_RETURN_IF_ERROR(ReadJob(*st, &jobs.emplace_back()));
  if (rc != SQLITE_DONE) return Error(rc, "cannot list jobs");
  return jobs;
}

absl::StatusOr<int64_t> JobStore::DeleteFinishedBefore(int64_t cutoff_unix_ms, int64_t batch, int64_t max_batches) {
  if (batch <= 0) return absl::InvalidArgumentError(absl::StrCat("a deletion batch of ", batch, " jobs"));
  int64_t deleted = 0;
  for (int64_t done = 0; max_batches < 0 || done < max_batches; ++done) {
    // One batch per transaction, the lock released between them: a retention pass over many jobs never
    // holds up the journal's commits (and so the jobs' clients) for longer than one batch.
    std::lock_guard<std::mutex> lock(mu_);
    Transaction txn(this);
    JOB_STORE_RETURN_IF_ERROR(txn.Begin());
    std::vector<std::string> ids;
    {
      absl::StatusOr<Statement> st = Prepare(
          "SELECT job_id FROM jobs WHERE state IN (4, 5, 6) AND finished_unix_ms < ? ORDER BY finished_unix_ms LIMIT ?");
      if (!st.ok()) return st.status();
      st->BindInt(cutoff_unix_ms).BindInt(batch);
      int rc;
      while ((rc = st->Step()) == SQLITE_ROW) ids.push_back(st->Bytes(0));
      if (rc != SQLITE_DONE) return Error(rc, "cannot find expired jobs");
    }
    for (const std::string& id : ids) {
      for (const char* sql : {"DELETE FROM job_tokens WHERE job_id = ?", "DELETE FROM jobs WHERE job_id = ?"}) {
        absl::StatusOr<Statement> st = Prepare(sql);
        if (!st.ok()) return st.status();
        if (const int rc = st->BindText(id).Step(); rc != SQLITE_DONE) return Error(rc, "cannot delete a job");
      }
    }
    JOB_STORE_RETURN_IF_ERROR(txn.Commit());
    deleted += static_cast<int64_t>(ids.size());
    if (static_cast<int64_t>(ids.size()) < batch) break;
  }
  return deleted;
}

absl::StatusOr<bool> JobStore::WasIssued(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<Statement> st = Prepare("SELECT 1 FROM issued_ids WHERE job_id = ?");
  if (!st.ok()) return st.status();
  const int rc = st->BindText(job_id).Step();
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Error(rc, "cannot look up a job id");
  return rc == SQLITE_ROW;
}

absl::StatusOr<JobStore::Statement> JobStore::Prepare(const char* sql) {
  auto it = statements_.find(sql);
  if (it == statements_.end()) {
    sqlite3_stmt* stmt = nullptr;
    const int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) return Error(rc, absl::StrCat("cannot prepare \"", sql, "\""));
    it = statements_.emplace(sql, stmt).first;
  }
  return Statement(it->second);
}

absl::Status JobStore::Exec(const char* sql) {
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? absl::OkStatus() : Error(rc, absl::StrCat("cannot run \"", sql, "\""));
}

absl::Status JobStore::Error(int rc, const std::string& what) const {
  const std::string message = absl::StrCat(path_, ": ", what, ": ", sqlite3_errmsg(db_));
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
      return Refuse(absl::StrCat("not an SQLite database (", sqlite3_errmsg(db_), ")"));
    case SQLITE_CORRUPT:
      return absl::DataLossError(message);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(message);
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status JobStore::Refuse(const std::string& why) const {
  return absl::FailedPreconditionError(absl::StrCat(path_, " is ", why, "; refusing to use it"));
}

}  // namespace layerpipe
