#include "coordinator/jobs/job_journal.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace layerpipe {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kRetentionBatch = 1000;

bool IsFinalState(v1::JobState s) {
  return s == v1::JOB_SUCCEEDED || s == v1::JOB_FAILED || s == v1::JOB_CANCELLED;
}

}  // namespace

void JobJournal::Waker::Wake() {
  {
    std::lock_guard<std::mutex> lock(mu);
    woken = true;
  }
  cv.notify_one();
}

int64_t JobJournal::UnixMs(Clock::time_point t) {
  const auto wall = std::chrono::system_clock::now() - std::chrono::duration_cast<std::chrono::system_clock::duration>(Clock::now() - t);
  return std::chrono::duration_cast<std::chrono::milliseconds>(wall.time_since_epoch()).count();
}

Clock::time_point JobJournal::SteadyOf(int64_t unix_ms) {
  const int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  return Clock::now() - std::chrono::milliseconds(now_ms - unix_ms);
}

std::string JobJournal::EncodeError(const absl::Status& error) {
  return error.ok() ? std::string() : absl::StrCat(static_cast<int>(error.code()), ":", error.message());
}

absl::Status JobJournal::DecodeError(const std::string& text) {
  if (text.empty()) return absl::OkStatus();
  const size_t colon = text.find(':');
  int code = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(text.substr(0, colon), &code) || code <= 0 || code > 16) {
    return absl::UnknownError(text);
  }
  return absl::Status(static_cast<absl::StatusCode>(code), text.substr(colon + 1));
}

StoredJobState JobJournal::StoredStateOf(v1::JobState state) {
  switch (state) {
    case v1::JOB_PREFILLING: return StoredJobState::kPrefilling;
    case v1::JOB_DECODING: return StoredJobState::kDecoding;
    case v1::JOB_SUCCEEDED: return StoredJobState::kSucceeded;
    case v1::JOB_FAILED: return StoredJobState::kFailed;
    case v1::JOB_CANCELLED: return StoredJobState::kCancelled;
    default: return StoredJobState::kQueued;
  }
}

JobJournal::JobJournal(JobStore* store, JobJournalOptions options, std::function<void(absl::Time)> expire,
                       std::function<void(const std::shared_ptr<Request>&)> recorded)
    : store_(store), options_(options), expire_(std::move(expire)), recorded_(std::move(recorded)) {}

JobJournal::~JobJournal() {
  {
    std::lock_guard<std::mutex> lock(waker_->mu);
    waker_->stopping = true;
  }
  waker_->cv.notify_one();
  if (thread_.joinable()) thread_.join();
}

void JobJournal::Start() { thread_ = std::thread([this] { Loop(); }); }

absl::Status JobJournal::Add(const std::shared_ptr<Request>& job, const std::string& request_blob) {
  if (store_ != nullptr) {
    StoredJob record;
    record.job_id = job->job_id;
    record.owner = job->owner;
    record.request = request_blob;
    record.prompt_tokens = static_cast<int64_t>(job->prompt.size());
    record.created_unix_ms = UnixMs(job->created);
    if (auto st = store_->Insert(&record); !st.ok()) return st;
  }
  Follow(job, 0);
  return absl::OkStatus();
}

void JobJournal::Watch(Request& job) {
  if (store_ == nullptr) return;  // nothing to write; retention reads the jobs themselves
  std::shared_ptr<Waker> waker = waker_;
  job.events.SetObserver([waker] { waker->Wake(); });
}

void JobJournal::Follow(const std::shared_ptr<Request>& job, int64_t tokens_written) {
  if (store_ == nullptr) return;
  Tracked t;
  t.job = job;
  t.tokens_written = tokens_written;
  std::lock_guard<std::mutex> lock(mu_);
  tracked_.push_back(std::move(t));
  waker_->Wake();  // it may have moved already
}

void JobJournal::WriteEnd(const std::shared_ptr<Request>& job, int64_t tokens_written) {
  if (store_ == nullptr) return;
  Tracked t;
  t.job = job;
  t.tokens_written = tokens_written;
  // A failed write leaves the end to the next restart, which finds the job unfinished again.
  if (Commit(t, /*force=*/true) && recorded_) recorded_(job);
}

bool JobJournal::Commit(Tracked& t, bool force) {
  std::vector<std::string> blobs;
  v1::JobState state;
  int64_t prefilled = 0, n = 0;
  std::string finish_reason, error;
  std::optional<Clock::time_point> finished;
  t.job->events.Read([&](const RequestView& v) {
    n = static_cast<int64_t>(v.tokens.size());
    state = JobStateOf(v);
    prefilled = v.prefilled;
    finish_reason = v.finish_reason;
    error = EncodeError(v.error);
    finished = v.finished;
    for (int64_t i = t.tokens_written; i < n; ++i) blobs.push_back(v.tokens[i].SerializeAsString());
  });
  const bool changed = n > t.tokens_written || state != t.state_written || prefilled != t.prefilled_written;
  if (!changed) return IsFinalState(t.state_written);
  const Clock::time_point now = Clock::now();
  if (t.dirty_since == Clock::time_point{}) t.dirty_since = now;
  const bool due = force || state != t.state_written || n - t.tokens_written >= options_.commit_tokens ||
                   now - t.dirty_since >= absl::ToChronoMilliseconds(options_.commit_interval);
  if (!due) return false;
  if (!blobs.empty()) {
    if (auto st = store_->AppendTokens(t.job->job_id, t.tokens_written, blobs); !st.ok()) {
      LP_LOG(WARNING) << "job " << t.job->job_id << ": cannot write its tokens: " << st.message();
      return false;  // tried again on the next round
    }
    t.tokens_written = n;
  }
  JobProgress p;
  p.state = StoredStateOf(state);
  p.prefilled = prefilled;
  p.finish_reason = finish_reason;
  p.error = error;
  if (IsFinalState(state)) p.finished_unix_ms = UnixMs(finished.value_or(now));
  if (auto st = store_->UpdateProgress(t.job->job_id, p); !st.ok()) {
    LP_LOG(WARNING) << "job " << t.job->job_id << ": cannot write its progress: " << st.message();
    return false;
  }
  t.state_written = state;
  t.prefilled_written = prefilled;
  t.dirty_since = {};
  return IsFinalState(state);
}

void JobJournal::Loop() {
  // Retention needs no precision beyond a tenth of itself (and never more often than 10 times a second).
  const absl::Duration sweep_every =
      std::clamp(options_.retention / 10, absl::Milliseconds(100), absl::Seconds(60));
  Clock::time_point next_sweep = Clock::now();
  for (;;) {
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(waker_->mu);
      waker_->cv.wait_for(lock, absl::ToChronoMilliseconds(options_.commit_interval),
                          [&] { return waker_->woken || waker_->stopping; });
      waker_->woken = false;
      stopping = waker_->stopping;
    }
    std::vector<std::shared_ptr<Request>> ended;
    {
      std::lock_guard<std::mutex> lock(mu_);
      tracked_.erase(std::remove_if(tracked_.begin(), tracked_.end(),
                                    [&](Tracked& t) {
                                      if (!Commit(t, /*force=*/stopping)) return false;
                                      ended.push_back(t.job);
                                      return true;
                                    }),
                     tracked_.end());
    }
    // Outside mu_: the callee takes its own locks, which SubmitJob holds while it calls Follow.
    if (recorded_) {
      for (const auto& job : ended) recorded_(job);
    }
    if (stopping) return;
    if (Clock::now() >= next_sweep) {
      next_sweep = Clock::now() + absl::ToChronoMilliseconds(sweep_every);
      const absl::Time cutoff = absl::Now() - options_.retention;
      if (expire_) expire_(cutoff);
      if (store_ != nullptr) {
        // One batch per round: a backlog of expired jobs is worked off between the rounds' commits, so the
        // running jobs' records never wait behind it.
        auto deleted = store_->DeleteFinishedBefore(absl::ToUnixMillis(cutoff), kRetentionBatch, /*max_batches=*/1);
        if (!deleted.ok()) LP_LOG(WARNING) << "deleting expired jobs: " << deleted.status().message();
        if (deleted.ok() && *deleted == kRetentionBatch) next_sweep = Clock::now();
      }
    }
  }
}

}  // namespace layerpipe
