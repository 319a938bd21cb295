// The coordinator's finished jobs at scale: writes N jobs of 16 tokens through the job store the way the
// journal does (Insert, then the tokens, then the final progress: one transaction each), retires each into
// the bounded cache that stands in front of the store, and prints this process's RSS as they accumulate.
// Then times what a client asks of a store that size: ListJobs pages (newest, deep, by state, by owner),
// GetJob of a finished job, and one retention pass.
//
//   bench_job_store [--jobs 1000000] [--dir /tmp/bench_job_store] [--keep]
//
// --keep leaves the store in place without the retention pass: a real coordinator can then be started on
// it (bench/bench_job_memory.py --state-dir DIR) to measure it at that size.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "coordinator/jobs/bounded_cache.h"
#include "coordinator/jobs/job_store.h"

ABSL_FLAG(int64_t, jobs, 1000000, "finished jobs to accumulate");
ABSL_FLAG(int64_t, tokens, 16, "tokens per job");
ABSL_FLAG(std::string, dir, "/tmp/bench_job_store", "state directory (emptied first)");
ABSL_FLAG(bool, keep, false, "keep the store (and skip the retention pass) for a coordinator to start on");

namespace {

using Clock = std::chrono::steady_clock;

double MiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

int64_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

template <typename F>
double BestMs(int reps, F f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, Ms(Clock::now() - t0));
  }
  return best;
}

void Check(const absl::Status& st, const char* what) {
  if (!st.ok()) {
    std::fprintf(stderr, "bench_job_store: %s: %s\n", what, std::string(st.message()).c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using namespace layerpipe;
  const int64_t n = absl::GetFlag(FLAGS_jobs), per_job = absl::GetFlag(FLAGS_tokens);
  const std::string dir = absl::GetFlag(FLAGS_dir);
  std::filesystem::remove_all(dir);
  auto opened = JobStore::Open(dir);
  Check(opened.status(), "open");
  std::unique_ptr<JobStore> store = *std::move(opened);
  // The coordinator's cache bounds (client_api.h), holding what a finished job's Request holds for 16
  // tokens: the prompt, the tokens and their text, ~2 KiB.
  BoundedCache<std::shared_ptr<const std::string>> cache(1024, int64_t{64} << 20);
  const std::string request(200, 'r');  // a serialised GenerateRequest of a short prompt
  const std::vector<std::string> tokens(per_job, std::string(12, 't'));  // serialised TokenInfo
  std::printf("bench_job_store: %lld jobs of %lld tokens into %s\n", static_cast<long long>(n),
              static_cast<long long>(per_job), dir.c_str());
  std::printf("%10s %10s %12s %10s\n", "jobs", "RSS MiB", "jobs/s", "db MiB");
  const int64_t rss0 = RssBytes();
  int64_t rss_min = std::numeric_limits<int64_t>::max(), rss_max = 0;
  const auto t0 = Clock::now();
  auto last = t0;
  const int64_t step = std::max<int64_t>(1, n / 10);
  for (int64_t i = 0; i < n; ++i) {
    StoredJob job;
    job.job_id = absl::StrCat("job-", i);
    job.owner = i % 10 == 0 ? "alice" : "bob";
    job.request = request;
    job.prompt_tokens = 20;
    job.created_unix_ms = 1000 + i;
    Check(store->Insert(&job), "insert");
    Check(store->AppendTokens(job.job_id, 0, tokens), "tokens");
    JobProgress end{.state = i % 100 == 0 ? StoredJobState::kFailed : StoredJobState::kSucceeded, .prefilled = 20,
                    .finish_reason = "length", .finished_unix_ms = 2000 + i};
    Check(store->UpdateProgress(job.job_id, end), "progress");
    cache.Put(job.job_id, std::make_shared<const std::string>(2048, 'c'), 2048);
    if ((i + 1) % step == 0 || i + 1 == n) {
      const int64_t rss = RssBytes();
      // From the first tenth on: by then the cache has filled.
      rss_min = std::min(rss_min, rss);
      rss_max = std::max(rss_max, rss);
      const auto now = Clock::now();
      std::error_code ec;
      const auto db = std::filesystem::file_size(std::filesystem::path(dir) / "jobs.sqlite3", ec) +
                      std::filesystem::file_size(std::filesystem::path(dir) / "jobs.sqlite3-wal", ec);
      std::printf("%10lld %10.1f %12.0f %10.0f\n", static_cast<long long>(i + 1), MiB(rss),
                  static_cast<double>(step) / std::chrono::duration<double>(now - last).count(), MiB(db));
      std::fflush(stdout);
      last = now;
    }
  }
  std::printf("RSS from the first tenth on: %.1f .. %.1f MiB (spread %.1f MiB; %.1f MiB before any job); "
              "cache %lld jobs, %.1f MiB; %.0f s\n",
              MiB(rss_min), MiB(rss_max), MiB(rss_max - rss_min), MiB(rss0), static_cast<long long>(cache.entries()),
              MiB(cache.bytes()), std::chrono::duration<double>(Clock::now() - t0).count());

  auto page = [&](JobQuery q, const char* name) {
    size_t got = 0;
    const double ms = BestMs(20, [&] {
      auto rows = store->List(q);
      Check(rows.status(), name);
      got = rows->size();
    });
    std::printf("ListJobs page (%s): %zu jobs in %.2f ms\n", name, got, ms);
  };
  page({.limit = 101}, "newest, 100 + 1");
  page({.before_seq = n / 2, .limit = 101}, "from the middle");
  page({.before_seq = 500, .limit = 1001}, "the oldest 499, asking for 1000 + 1");
  page({.state = StoredJobState::kFailed, .limit = 101}, "failed only, 1 in 100");
  page({.owner = "alice", .limit = 101}, "one owner's, 1 in 10");
  std::printf("GetJob of an old finished job (store read): %.3f ms\n",
              BestMs(20, [&] { Check(store->LoadJob(absl::StrCat("job-", n / 3)).status(), "load"); }));
  if (absl::GetFlag(FLAGS_keep)) {
    std::printf("kept %s for a coordinator (--state-dir)\n", dir.c_str());
    return 0;
  }
  const auto d0 = Clock::now();
  auto deleted = store->DeleteFinishedBefore(2000 + n / 10);
  Check(deleted.status(), "delete");
  std::printf("retention: %lld jobs deleted in %.0f ms (batches of 1000)\n", static_cast<long long>(*deleted),
              Ms(Clock::now() - d0));
  store.reset();
  std::filesystem::remove_all(dir);
  return 0;
}
