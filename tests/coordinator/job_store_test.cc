#include "coordinator/jobs/job_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "coordinator/jobs/state_dir.h"

namespace layerpipe {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;

class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (fs::path(::testing::TempDir()) /
             absl::StrCat("job_store_test_", ::testing::UnitTest::GetInstance()->current_test_info()->name(), "_",
                          getpid()))
                .string();
    fs::remove_all(root_);
    fs::create_directories(root_);
    dir_ = root_;
    path_ = (fs::path(dir_) / "jobs.sqlite3").string();
  }
  void TearDown() override { fs::remove_all(root_); }

  std::unique_ptr<JobStore> OpenOrDie() {
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(dir_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  static StoredJob Job(const std::string& id) {
    StoredJob job;
    job.job_id = id;
    job.owner = "alice";
    job.request = "req-" + id;
    job.created_unix_ms = 1000;
    return job;
  }

  // Runs `sql` on the database file directly, as another program would.
  void Sql(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    char* error = nullptr;
    const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
    EXPECT_EQ(rc, SQLITE_OK) << sql << ": " << (error ? error : "");
    sqlite3_free(error);
    sqlite3_close(db);
  }
  // The first column of the first row of `sql`, as text ("" without rows).
  std::string Query(const std::string& sql) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    std::string value;
    if (stmt != nullptr && sqlite3_step(stmt) == SQLITE_ROW) {
      value = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    return value;
  }
  std::string FileBytes() {
    std::ifstream in(path_, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    return bytes.str();
  }
  void ExpectRefused(const std::string& expected_text) {
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(dir_);
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
    EXPECT_NE(store.status().message().find(path_), std::string::npos) << store.status();
    EXPECT_NE(store.status().message().find(expected_text), std::string::npos) << store.status();
  }

  std::string root_;  // removed at the end
  std::string dir_, path_;
};

void ExpectSameJob(const StoredJob& got, const StoredJob& want) {
  EXPECT_EQ(got.job_id, want.job_id);
  EXPECT_EQ(got.seq, want.seq) << want.job_id;
  EXPECT_EQ(got.owner, want.owner) << want.job_id;
  EXPECT_EQ(got.request, want.request) << want.job_id;
  EXPECT_EQ(got.prompt_tokens, want.prompt_tokens) << want.job_id;
  EXPECT_EQ(got.state, want.state) << want.job_id;
  EXPECT_EQ(got.prefilled, want.prefilled) << want.job_id;
  EXPECT_EQ(got.finish_reason, want.finish_reason) << want.job_id;
  EXPECT_EQ(got.error, want.error) << want.job_id;
  EXPECT_EQ(got.created_unix_ms, want.created_unix_ms) << want.job_id;
  EXPECT_EQ(got.finished_unix_ms, want.finished_unix_ms) << want.job_id;
  EXPECT_EQ(got.tokens, want.tokens) << want.job_id;
}

std::vector<std::string> Ids(const std::vector<StoredJob>& jobs) {
  std::vector<std::string> ids;
  for (const StoredJob& job : jobs) ids.push_back(job.job_id);
  return ids;
}

TEST(StoredJobStateTest, FinalStates) {
  EXPECT_FALSE(IsFinal(StoredJobState::kQueued));
  EXPECT_FALSE(IsFinal(StoredJobState::kPrefilling));
  EXPECT_FALSE(IsFinal(StoredJobState::kDecoding));
  EXPECT_TRUE(IsFinal(StoredJobState::kSucceeded));
  EXPECT_TRUE(IsFinal(StoredJobState::kFailed));
  EXPECT_TRUE(IsFinal(StoredJobState::kCancelled));
}

TEST_F(JobStoreTest, RoundTripsEveryFieldAcrossReopen) {
  StoredJob full;
  full.job_id = "job-\xc3\xa9-1";
  full.owner = "bob";
  full.request = "\x0a\x00\x12\xff\x00tail"s;
  full.prompt_tokens = 4321;
  full.state = StoredJobState::kDecoding;
  full.created_unix_ms = 1'700'000'000'123;
  StoredJob bare;
  bare.job_id = "job-2";
  bare.owner = "";
  bare.request = "";
  {
    std::unique_ptr<JobStore> store = OpenOrDie();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Insert(&full).ok());
    ASSERT_TRUE(store->Insert(&bare).ok());
    EXPECT_EQ(full.seq, 1);
    EXPECT_EQ(bare.seq, 2);
    full.tokens = {"\x00\x01"s, "", "\xff\x00\xfe"s};
    ASSERT_TRUE(store->AppendTokens(full.job_id, 0, full.tokens).ok());
    JobProgress progress{.state = StoredJobState::kFailed,
                         .prefilled = 4000,
                         .finish_reason = "error",
                         .error = "worker\0lost"s,
                         .finished_unix_ms = 1'700'000'000'999};
    ASSERT_TRUE(store->UpdateProgress(full.job_id, progress).ok());
    full.state = progress.state;
    full.prefilled = progress.prefilled;
    full.finish_reason = progress.finish_reason;
    full.error = progress.error;
    full.finished_unix_ms = progress.finished_unix_ms;
  }
  std::unique_ptr<JobStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  ExpectSameJob((*jobs)[0], full);
  ExpectSameJob((*jobs)[1], bare);
}

TEST_F(JobStoreTest, SeqFollowsSubmissionAndIsNeverReused) {
  {
    std::unique_ptr<JobStore> store = OpenOrDie();
    ASSERT_NE(store, nullptr);
    for (const char* id : {"b", "a", "c"}) {
      StoredJob job = Job(id);
      ASSERT_TRUE(store->Insert(&job).ok());
    }
    // The newest is the one deleted: a seq taken from the largest remaining one would come back.
    ASSERT_TRUE(store->UpdateProgress("c", {.state = StoredJobState::kSucceeded, .finished_unix_ms = 10}).ok());
    absl::StatusOr<int64_t> deleted = store->DeleteFinishedBefore(100);
    ASSERT_TRUE(deleted.ok()) << deleted.status();
    EXPECT_EQ(*deleted, 1);
  }
  std::unique_ptr<JobStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  StoredJob d = Job("d");
  ASSERT_TRUE(store->Insert(&d).ok());
  EXPECT_EQ(d.seq, 4);
  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(Ids(*jobs), (std::vector<std::string>{"b", "a", "d"}));
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[0].seq, 1);
  EXPECT_EQ((*jobs)[1].seq, 2);
  EXPECT_EQ((*jobs)[2].seq, 4);
}

TEST_F(JobStoreTest, AppendTokensIsIdempotentAndRefusesGaps) {
  std::unique_ptr<JobStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  StoredJob job = Job("j");
  ASSERT_TRUE(store->Insert(&job).ok());
  ASSERT_TRUE(store->AppendTokens("j", 0, {"t0", "t1"}).ok());
  // A retry with other bytes leaves the stored ones; an overlapping append adds only what is new.
  ASSERT_TRUE(store->AppendTokens("j", 0, {"x0", "x1"}).ok());
  ASSERT_TRUE(store->AppendTokens("j", 1, {"x1", "t2", "t3"}).ok());
  ASSERT_TRUE(store->AppendTokens("j", 4, {}).ok());

  absl::Status gap = store->AppendTokens("j", 5, {"t5"});
  EXPECT_EQ(gap.code(), absl::StatusCode::kInvalidArgument) << gap;
  EXPECT_EQ(store->AppendTokens("j", -1, {"t"}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->AppendTokens("nobody", 0, {"t"}).code(), absl::StatusCode::kNotFound);

  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].tokens, (std::vector<std::string>{"t0", "t1", "t2", "t3"}));
  ASSERT_TRUE(store->AppendTokens("j", 4, {"t4"}).ok());
  jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ((*jobs)[0].tokens.size(), 5u);
}

TEST_F(JobStoreTest, InsertRefusesTokensAndDuplicates) {
  std::unique_ptr<JobStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  StoredJob with_tokens = Job("t");
  with_tokens.tokens = {"x"};
  EXPECT_EQ(store->Insert(&with_tokens).code(), absl::StatusCode::kInvalidArgument);
  StoredJob job = Job("a");
  ASSERT_TRUE(store->Insert(&job).ok());
  StoredJob again = Job("a");
  again.owner = "mallory";
  EXPECT_EQ(store->Insert(&again).code(), absl::StatusCode::kAlreadyExists);
  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].owner, "alice");
  EXPECT_EQ(*store->WasIssued("t"), false);
}

TEST_F(JobStoreTest, UpdateProgressOfUnknownJobIsNotFound) {
  std::unique_ptr<JobStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  StoredJob job = Job("known");
  ASSERT_TRUE(store->Insert(&job).ok());
  absl::Status s = store->UpdateProgress("unknown", {.state = StoredJobState::kSucceeded});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(Ids(*jobs), std::vector<std::string>{"known"});
  EXPECT_EQ((*jobs)[0].state, StoredJobState::kQueued);
}

TEST_F(JobStoreTest, DeleteFinishedBeforeDeletesOnlyOldFinalJobs) {
  std::unique_ptr<JobStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  const std::vector<std::pair<std::string, JobProgress>> jobs_and_progress = {
      {"old-ok", {.state = StoredJobState::kSucceeded, .finished_unix_ms = 100}},
      {"old-failed", {.state = StoredJobState::kFailed, .finished_unix_ms = 150}},
      {"old-cancelled", {.state = StoredJobState::kCancelled, .finished_unix_ms = 199}},
      {"at-cutoff", {.state = StoredJobState::kSucceeded, .finished_unix_ms = 200}},
      {"recent", {.state = StoredJobState::kSucceeded, .finished_unix_ms = 500}},
      {"decoding", {.state = StoredJobState::kDecoding, .prefilled = 3}},
      {"queued", {.state = StoredJobState::kQueued}},
  };
  for (const auto& [id, progress] : jobs_and_progress) {
    StoredJob job = Job(id);
    ASSERT_TRUE(store->Insert(&job).ok()) << id;
    ASSERT_TRUE(store->AppendTokens(id, 0, {id + "-0", id + "-1"}).ok()) << id;
    ASSERT_TRUE(store->UpdateProgress(id, progress).ok()) << id;
  }
  absl::StatusOr<int64_t> deleted = store->DeleteFinishedBefore(200);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 3);

  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(Ids(*jobs), (std::vector<std::string>{"at-cutoff", "recent", "decoding", "queued"}));
  for (const StoredJob& job : *jobs) {
    EXPECT_EQ(job.tokens, (std::vector<std::string>{job.job_id + "-0", job.job_id + "-1"}));
  }
  EXPECT_EQ(Query("SELECT COUNT(*) FROM job_tokens WHERE job_id LIKE 'old-%'"), "0");
  EXPECT_EQ(Query("SELECT COUNT(*) FROM job_tokens"), "8");

  for (const char* id : {"old-ok", "old-failed", "old-cancelled"}) {
    absl::StatusOr<bool> issued = store->WasIssued(id);
    ASSERT_TRUE(issued.ok()) << issued.status();
    EXPECT_TRUE(*issued) << id;
    StoredJob again = Job(id);
    EXPECT_EQ(store->Insert(&again).code(), absl::StatusCode::kAlreadyExists) << id;
  }
  absl::StatusOr<bool> never = store->WasIssued("never");
  ASSERT_TRUE(never.ok()) << never.status();
  EXPECT_FALSE(*never);
  deleted = store->DeleteFinishedBefore(200);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 0);

  store.reset();
  store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(*store->WasIssued("old-ok"));
  StoredJob again = Job("old-ok");
  EXPECT_EQ(store->Insert(&again).code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(JobStoreTest, OpenCreatesDirectoriesAndAdoptsAnEmptyFile) {
  dir_ = (fs::path(dir_) / "a" / "b").string();
  path_ = (fs::path(dir_) / "jobs.sqlite3").string();
  {
    std::unique_ptr<JobStore> store = OpenOrDie();
    ASSERT_NE(store, nullptr);
  }
  EXPECT_TRUE(fs::exists(path_));
  EXPECT_EQ(Query("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(Query("SELECT value FROM meta WHERE key = 'application'"), "layerpipe-jobs");
  EXPECT_EQ(Query("SELECT value FROM meta WHERE key = 'schema_version'"), "2");

  fs::remove(path_);
  std::ofstream(path_).close();
  ASSERT_EQ(fs::file_size(path_), 0u);
  std::unique_ptr<JobStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  StoredJob job = Job("a");
  EXPECT_TRUE(store->Insert(&job).ok());
}

TEST_F(JobStoreTest, OpenRefusesGarbage) {
  std::string garbage(4096, '\0');
  std::mt19937 random(42);
  for (char& c : garbage) c = static_cast<char>(random());
  std::ofstream(path_, std::ios::binary) << garbage;
  ExpectRefused("not an SQLite database");
  EXPECT_TRUE(FileBytes() == garbage) << "the file changed";
  EXPECT_FALSE(fs::exists(path_ + "-wal"));
}

TEST_F(JobStoreTest, OpenRefusesATextFile) {
  const std::string text = "job_id,owner\nabc,alice\n";
  std::ofstream(path_, std::ios::binary) << text;
  ExpectRefused("not an SQLite database");
  EXPECT_TRUE(FileBytes() == text) << "the file changed";
}

TEST_F(JobStoreTest, OpenRefusesAForeignDatabaseAndLeavesItAlone) {
  Sql("CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('carol');");
  const std::string before = FileBytes();
  ExpectRefused("not a layerpipe job store");
  EXPECT_TRUE(FileBytes() == before) << "the file changed";
  EXPECT_EQ(Query("SELECT name FROM users"), "carol");
  EXPECT_EQ(Query("SELECT COUNT(*) FROM sqlite_schema WHERE name = 'meta'"), "0");
  EXPECT_EQ(Query("PRAGMA journal_mode"), "delete");
}

TEST_F(JobStoreTest, OpenRefusesAForeignDatabaseWithAMetaTable) {
  Sql("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT); INSERT INTO meta VALUES ('application', 'other');");
  ExpectRefused("not a layerpipe job store");
  Sql("DROP TABLE meta; CREATE TABLE meta (k TEXT);");
  ExpectRefused("not a layerpipe job store");
}

TEST_F(JobStoreTest, OpenRefusesOurStoreWithForeignTables) {
  { ASSERT_NE(OpenOrDie(), nullptr); }
  Sql("CREATE TABLE users (name TEXT);");
  ExpectRefused("foreign tables users");
}

TEST_F(JobStoreTest, OpenRefusesAnotherSchemaVersion) {
  {
    std::unique_ptr<JobStore> store = OpenOrDie();
    ASSERT_NE(store, nullptr);
    StoredJob job = Job("a");
    ASSERT_TRUE(store->Insert(&job).ok());
  }
  Sql("UPDATE meta SET value = '3' WHERE key = 'schema_version';");
  ExpectRefused("schema version '3', expected '2'");
  EXPECT_EQ(Query("SELECT value FROM meta WHERE key = 'schema_version'"), "3");
  EXPECT_EQ(Query("SELECT job_id FROM jobs"), "a");
}

TEST_F(JobStoreTest, CommittedDataSurvivesSigkill) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // No gtest assertions here: the child reports by how it ends.
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(dir_);
    if (!store.ok()) _exit(2);
    StoredJob job = Job("killed");
    job.request = "r\0r"s;
    if (!(*store)->Insert(&job).ok()) _exit(3);
    if (!(*store)->AppendTokens("killed", 0, {"a", "\0b"s}).ok()) _exit(4);
    raise(SIGKILL);
    _exit(5);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "child exited with " << WEXITSTATUS(wstatus);
  EXPECT_EQ(WTERMSIG(wstatus), SIGKILL);
  // Nobody checkpointed: the commits are only in the write-ahead log.
  EXPECT_GT(fs::file_size(path_ + "-wal"), 0u);

  std::unique_ptr<JobStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].job_id, "killed");
  EXPECT_EQ((*jobs)[0].request, "r\0r"s);
  EXPECT_EQ((*jobs)[0].tokens, (std::vector<std::string>{"a", "\0b"s}));
}

TEST_F(JobStoreTest, ServesSeveralThreads) {
  std::unique_ptr<JobStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 4, kJobsEach = 25, kTokens = 8;
  std::vector<std::thread> threads;
  std::atomic<int> failures = 0;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int j = 0; j < kJobsEach; ++j) {
        StoredJob job = Job(absl::StrCat("t", t, "-", j));
        if (!store->Insert(&job).ok()) ++failures;
        for (int i = 0; i < kTokens; ++i) {
          if (!store->AppendTokens(job.job_id, i, {absl::StrCat(i)}).ok()) ++failures;
        }
        if (!store->UpdateProgress(job.job_id, {.state = StoredJobState::kSucceeded, .finished_unix_ms = 1}).ok()) {
          ++failures;
        }
        if (!store->LoadAll().ok()) ++failures;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures, 0);
  absl::StatusOr<std::vector<StoredJob>> jobs = store->LoadAll();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), static_cast<size_t>(kThreads * kJobsEach));
  for (size_t i = 0; i < jobs->size(); ++i) {
    EXPECT_EQ((*jobs)[i].seq, static_cast<int64_t>(i + 1));
    EXPECT_EQ((*jobs)[i].tokens, (std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6", "7"}));
    EXPECT_EQ((*jobs)[i].state, StoredJobState::kSucceeded);
  }
}

// 30 jobs: owners alice, bob and nobody in turn; every third one succeeded, the others decoding; job i
// has i % 4 tokens.
void FillForListing(JobStore* store) {
  for (int i = 0; i < 30; ++i) {
    StoredJob job;
    job.job_id = absl::StrCat("j", i);
    job.owner = i % 3 == 0 ? "alice" : i % 3 == 1 ? "bob" : "";
    job.request = "req";
    job.prompt_tokens = i;
    ASSERT_TRUE(store->Insert(&job).ok());
    std::vector<std::string> tokens;
    for (int t = 0; t < i % 4; ++t) tokens.push_back("t");
    ASSERT_TRUE(store->AppendTokens(job.job_id, 0, tokens).ok());
    JobProgress p{.state = i % 3 == 2 ? StoredJobState::kSucceeded : StoredJobState::kDecoding, .prefilled = i};
    if (p.state == StoredJobState::kSucceeded) p.finished_unix_ms = 1000 + i;
    ASSERT_TRUE(store->UpdateProgress(job.job_id, p).ok());
  }
}

std::vector<std::string> Page(JobStore* store, const JobQuery& q) {
  absl::StatusOr<std::vector<StoredJob>> jobs = store->List(q);
  EXPECT_TRUE(jobs.ok()) << jobs.status();
  return jobs.ok() ? Ids(*jobs) : std::vector<std::string>{};
}

TEST_F(JobStoreTest, ListPagesNewestFirst) {
  std::unique_ptr<JobStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  FillForListing(store.get());
  absl::StatusOr<std::vector<StoredJob>> first = store->List({.limit = 12});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), 12u);
  std::vector<std::string> seen;
  for (size_t k = 0; k < first->size(); ++k) {
    const StoredJob& job = (*first)[k];
    const int i = 29 - static_cast<int>(k);
    EXPECT_EQ(job.job_id, absl::StrCat("j", i));
    EXPECT_EQ(job.seq, i + 1);
    EXPECT_EQ(job.prompt_tokens, i);
    EXPECT_EQ(job.prefilled, i);
    EXPECT_EQ(job.generated, i % 4) << job.job_id;
    EXPECT_TRUE(job.request.empty() && job.tokens.empty()) << "a listing carries no requests or tokens";
    seen.push_back(job.job_id);
  }
  // The middle page starts after the first's oldest, the last one is short, and nothing follows it.
  std::vector<std::string> middle = Page(store.get(), {.before_seq = first->back().seq, .limit = 12});
  ASSERT_EQ(middle.size(), 12u);
  EXPECT_EQ(middle.front(), "j17");
  std::vector<std::string> last = Page(store.get(), {.before_seq = 6, .limit = 12});
  EXPECT_EQ(last, (std::vector<std::string>{"j4", "j3", "j2", "j1", "j0"}));
  EXPECT_TRUE(Page(store.get(), {.before_seq = 1, .limit = 12}).empty());
  EXPECT_TRUE(Page(store.get(), {.limit = 0}).empty());
}

TEST_F(JobStoreTest, ListFiltersByStateAndOwner) {
  std::unique_ptr<JobStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  FillForListing(store.get());
  EXPECT_EQ(Page(store.get(), {.state = StoredJobState::kSucceeded, .limit = 4}),
            (std::vector<std::string>{"j29", "j26", "j23", "j20"}));
  EXPECT_EQ(Page(store.get(), {.state = StoredJobState::kSucceeded, .before_seq = 21, .limit = 100}),
            (std::vector<std::string>{"j17", "j14", "j11", "j8", "j5", "j2"}));
  EXPECT_TRUE(Page(store.get(), {.state = StoredJobState::kFailed, .limit = 100}).empty());
  // An owner sees their own jobs and those without an owner, never another's.
  EXPECT_EQ(Page(store.get(), {.owner = "alice", .limit = 5}), (std::vector<std::string>{"j29", "j27", "j26", "j24", "j23"}));
  EXPECT_EQ(Page(store.get(), {.state = StoredJobState::kDecoding, .owner = "bob", .limit = 3}),
            (std::vector<std::string>{"j28", "j25", "j22"}));
  EXPECT_EQ(Page(store.get(), {.owner = "carol", .limit = 3}), (std::vector<std::string>{"j29", "j26", "j23"}));
}

TEST_F(JobStoreTest, LoadJobAndLoadUnfinished) {
  std::unique_ptr<JobStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  FillForListing(store.get());
  absl::StatusOr<StoredJob> job = store->LoadJob("j7");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->owner, "bob");
  EXPECT_EQ(job->request, "req");
  EXPECT_EQ(job->tokens, (std::vector<std::string>{"t", "t", "t"}));
  EXPECT_EQ(job->generated, 3);
  EXPECT_EQ(store->LoadJob("nope").status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<std::vector<StoredJob>> unfinished = store->LoadUnfinished();
  ASSERT_TRUE(unfinished.ok()) << unfinished.status();
  ASSERT_EQ(unfinished->size(), 20u);
  for (const StoredJob& u : *unfinished) {
    EXPECT_EQ(u.state, StoredJobState::kDecoding) << u.job_id;
    EXPECT_EQ(static_cast<int64_t>(u.tokens.size()), u.generated) << u.job_id;
    EXPECT_EQ(u.request, "req");
  }
  EXPECT_EQ(unfinished->front().job_id, "j0");
  EXPECT_EQ(unfinished->back().job_id, "j28");
}

TEST_F(JobStoreTest, DeleteFinishedBeforeWorksInBatches) {
  std::unique_ptr<JobStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  FillForListing(store.get());  // 10 succeeded, finished at 1002, 1005, ..., 1029
  absl::StatusOr<int64_t> deleted = store->DeleteFinishedBefore(1020, /*batch=*/3);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 6);  // 1002 ... 1017: two full batches, then one that finds nothing
  EXPECT_EQ(Page(store.get(), {.state = StoredJobState::kSucceeded, .limit = 100}),
            (std::vector<std::string>{"j29", "j26", "j23", "j20"}));
  EXPECT_EQ(Query("SELECT COUNT(*) FROM job_tokens WHERE job_id IN ('j2', 'j5', 'j8', 'j11', 'j14', 'j17')"), "0");
  EXPECT_EQ(store->DeleteFinishedBefore(1020, 0).status().code(), absl::StatusCode::kInvalidArgument);
  // At most so many batches: what the journal does, one batch a round.
  deleted = store->DeleteFinishedBefore(1030, /*batch=*/3, /*max_batches=*/1);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 3);
  EXPECT_EQ(Page(store.get(), {.state = StoredJobState::kSucceeded, .limit = 100}), (std::vector<std::string>{"j29"}));
}

TEST_F(JobStoreTest, UpgradesAVersion1Store) {
  {
    std::unique_ptr<JobStore> store = OpenOrDie();
    ASSERT_NE(store, nullptr);
    FillForListing(store.get());
  }
  // What version 1 had: the same tables without the indexes.
  Sql("DROP INDEX jobs_by_state; DROP INDEX jobs_finished; UPDATE meta SET value = '1' WHERE key = 'schema_version';");
  std::unique_ptr<JobStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Query("SELECT value FROM meta WHERE key = 'schema_version'"), "2");
  EXPECT_EQ(Query("SELECT COUNT(*) FROM sqlite_schema WHERE type = 'index' AND name IN ('jobs_by_state', 'jobs_finished')"), "2");
  EXPECT_EQ(Page(store.get(), {.state = StoredJobState::kSucceeded, .limit = 2}), (std::vector<std::string>{"j29", "j26"}));
}

TEST_F(JobStoreTest, OpenRefusesADatabaseAnotherStoreHoldsAndNamesIt) {
  std::unique_ptr<JobStore> first = OpenOrDie();
  ASSERT_NE(first, nullptr);
  ExpectRefused("is in use by another coordinator");
  absl::StatusOr<std::unique_ptr<JobStore>> second = JobStore::Open(dir_);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(absl::StrCat("pid ", getpid(), " on host ")), std::string::npos)
      << second.status();
  // The refused open left the holder's record, and the holder's store, as they were.
  StoredJob job = Job("still-mine");
  EXPECT_TRUE(first->Insert(&job).ok());
  EXPECT_TRUE(fs::exists(path_ + ".owner"));
  first.reset();
  EXPECT_FALSE(fs::exists(path_ + ".owner"));
  std::unique_ptr<JobStore> reopened = OpenOrDie();
  ASSERT_NE(reopened, nullptr);
  EXPECT_TRUE(*reopened->WasIssued("still-mine"));
}

TEST_F(JobStoreTest, AHolderKilledReleasesTheLock) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(dir_);
    const char byte = store.ok() ? 'y' : 'n';
    if (write(ready[1], &byte, 1) != 1) _exit(3);
    pause();  // holds the store until killed
    _exit(0);
  }
  close(ready[1]);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  ASSERT_EQ(byte, 'y') << "the child could not open the store";
  absl::StatusOr<std::unique_ptr<JobStore>> refused = JobStore::Open(dir_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find(absl::StrCat("pid ", child, " on host ")), std::string::npos)
      << refused.status();
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  // The kernel dropped the dead holder's lock; its stale owner line is simply overwritten.
  std::unique_ptr<JobStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  std::ifstream owner(path_ + ".owner");
  std::string line;
  std::getline(owner, line);
  EXPECT_EQ(line.rfind(absl::StrCat("pid ", getpid(), " on host "), 0), 0u) << line;
}

TEST_F(JobStoreTest, OpenMakesANewDirectoryPrivate) {
  dir_ = (fs::path(root_) / "state" / "layerpipe").string();
  path_ = (fs::path(dir_) / "jobs.sqlite3").string();
  std::unique_ptr<JobStore> store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(fs::status(dir_).permissions() & fs::perms::all, fs::perms::owner_all);
  // An existing directory keeps its mode: it is the operator's.
  store.reset();
  fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
  store = OpenOrDie();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(fs::status(dir_).permissions() & fs::perms::all,
            fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
}

TEST_F(JobStoreTest, OpenRefusesAStateDirThatIsAFile) {
  dir_ = (fs::path(root_) / "not_a_dir").string();
  std::ofstream(dir_) << "x";
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(dir_);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(dir_), std::string::npos) << store.status();
}

// Restores an environment variable when it goes out of scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    if (value == nullptr) unsetenv(name); else setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1); else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(DefaultStateDirTest, FollowsTheXdgRule) {
  ScopedEnv home("HOME", "/home/ada");
  {
    ScopedEnv ours("LAYERPIPE_STATE_DIR", "/srv/jobs");
    ScopedEnv xdg("XDG_STATE_HOME", "/xdg");
    EXPECT_EQ(DefaultStateDir(), "/srv/jobs");
  }
  {
    ScopedEnv ours("LAYERPIPE_STATE_DIR", "");  // empty counts as unset
    ScopedEnv xdg("XDG_STATE_HOME", "/xdg");
    EXPECT_EQ(DefaultStateDir(), "/xdg/layerpipe");
  }
  {
    ScopedEnv ours("LAYERPIPE_STATE_DIR", nullptr);
    ScopedEnv xdg("XDG_STATE_HOME", nullptr);
    EXPECT_EQ(DefaultStateDir(), "/home/ada/.local/state/layerpipe");
  }
}

}  // namespace
}  // namespace layerpipe
