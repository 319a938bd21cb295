// Keeps the jobs the coordinator runs in step with their durable records (job_store.h), and forgets
// finished jobs after their retention. A job's record is written before SubmitJob answers; from then on
// its progress (new tokens, prefill, state) is committed by a thread of its own at least every
// `commit_tokens` tokens, at every state change, and at most `commit_interval` after anything new — woken
// by the job's own events, so the pipeline never waits for the disk.
#ifndef LAYERPIPE_COORDINATOR_JOBS_JOB_JOURNAL_H_
#define LAYERPIPE_COORDINATOR_JOBS_JOB_JOURNAL_H_

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/jobs/job_store.h"
#include "coordinator/request.h"

namespace layerpipe {

struct JobJournalOptions {
  int64_t commit_tokens = 16;
  absl::Duration commit_interval = absl::Milliseconds(200);
  absl::Duration retention = absl::Hours(24);  // finished jobs are kept this long, then deleted
};

class JobJournal {
 public:
  // `store` may be null (jobs live in memory only): then only retention applies. From the journal's
  // thread: `expire` with a cutoff, to forget every job that finished before it; `recorded` with each job
  // whose end has just been committed (from then on the store alone can answer for it).
  JobJournal(JobStore* store, JobJournalOptions options, std::function<void(absl::Time cutoff)> expire,
             std::function<void(const std::shared_ptr<Request>&)> recorded = nullptr);
  ~JobJournal();  // commits what is pending and stops

  void Start();

  // Makes `job`'s events wake the journal. Before the job is submitted: the pipeline publishes from
  // its own thread as soon as it runs.
  void Watch(Request& job);
  // A job just submitted (and watched): its record is written now, and its progress from then on.
  absl::Status Add(const std::shared_ptr<Request>& job, const std::string& request_blob);
  // A job restored from its record (watched, not yet resubmitted), whose first `tokens_written` tokens are
  // stored.
  void Follow(const std::shared_ptr<Request>& job, int64_t tokens_written);
  // Writes the end of a restored job that its stored tokens had already ended (the process died before
  // the end was committed).
  void WriteEnd(const std::shared_ptr<Request>& job, int64_t tokens_written);

  JobStore* store() const { return store_; }

  // Wall-clock time of a steady-clock instant (records keep wall time; requests keep steady time), and back.
  static int64_t UnixMs(std::chrono::steady_clock::time_point t);
  static std::chrono::steady_clock::time_point SteadyOf(int64_t unix_ms);
  // A failed job's status as its record keeps it ("CODE:message"), and back.
  static std::string EncodeError(const absl::Status& error);
  static absl::Status DecodeError(const std::string& text);
  static StoredJobState StoredStateOf(v1::JobState state);

 private:
  struct Tracked {
    std::shared_ptr<Request> job;
    int64_t tokens_written = 0;
    v1::JobState state_written = v1::JOB_QUEUED;
    int64_t prefilled_written = 0;
    std::chrono::steady_clock::time_point dirty_since{};  // first uncommitted change; {} when clean
  };

  void Loop();
  // Commits what changed when due (or `force`); true once the job's end is written.
  bool Commit(Tracked& t, bool force);

  // What the jobs' observers poke: shared, so that a request outliving the journal pokes nothing freed.
  struct Waker {
    std::mutex mu;
    std::condition_variable cv;
    bool woken = false, stopping = false;
    void Wake();
  };

  JobStore* const store_;
  const JobJournalOptions options_;
  const std::function<void(absl::Time)> expire_;
  const std::function<void(const std::shared_ptr<Request>&)> recorded_;
  const std::shared_ptr<Waker> waker_ = std::make_shared<Waker>();
  std::mutex mu_;  // tracked_
  std::vector<Tracked> tracked_;  // unfinished jobs (and finished ones until their end is written)
  std::thread thread_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_JOBS_JOB_JOURNAL_H_
