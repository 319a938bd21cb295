// What the clients of one request see of it (its tokens and text so far, its state, its end), with a
// lock of its own: the pipeline publishes into it as the request progresses, and the API's handlers
// wait on it and read it without ever taking the pipeline's lock (so a slow client never holds up the
// scheduler, and the scheduler's lock stays private to it).
#ifndef LAYERPIPE_COORDINATOR_REQUEST_EVENTS_H_
#define LAYERPIPE_COORDINATOR_REQUEST_EVENTS_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/layerpipe.pb.h"

namespace layerpipe {

enum class RequestState { kQueued, kPrefilling, kDecoding, kDone };

struct RequestView {
  using Clock = std::chrono::steady_clock;

  RequestState state = RequestState::kQueued;
  int64_t prefilled = 0;              // prompt positions the pipeline's KV holds
  int64_t cached_tokens = 0;          // of them, taken from a kept prefix (the prefix cache)
  std::vector<v1::TokenInfo> tokens;  // one per generated id
  std::vector<std::string> pieces;    // text released with each generated id (same length as tokens)
  std::string final_text;             // text released when the request ended (held-back bytes)
  std::string finish_reason;
  absl::Status error;
  std::vector<float> score_logprobs;  // a score request's, once done
  std::vector<float> logits;          // a score request's with return_logits, once done
  std::optional<Clock::time_point> admitted, first_token, finished;

  bool done() const { return state == RequestState::kDone; }
};

// A generation job's state as the API reports it (JobInfo.state).
inline v1::JobState JobStateOf(const RequestView& v) {
  switch (v.state) {
    case RequestState::kQueued: return v1::JOB_QUEUED;
    case RequestState::kPrefilling: return v.tokens.empty() ? v1::JOB_PREFILLING : v1::JOB_DECODING;
    case RequestState::kDecoding: return v1::JOB_DECODING;
    case RequestState::kDone:
      if (!v.error.ok()) return v1::JOB_FAILED;
      return v.finish_reason == "cancelled" ? v1::JOB_CANCELLED : v1::JOB_SUCCEEDED;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

class RequestEvents {
 public:
  // Applies `update` to the view and wakes every waiter.
  template <typename Update>
  void Publish(Update&& update) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      update(view_);
    }
    changed_.notify_all();
    if (observer_) observer_();
  }

  // Called after every Publish, on the publishing thread (the pipeline's: it must be cheap and must not
  // read back into the pipeline). Set before the request is submitted; the job journal wakes on it.
  void SetObserver(std::function<void()> observer) { observer_ = std::move(observer); }

  // Waits until `ready(view)` holds or `timeout` passes, then calls `read(view)` under the lock.
  // Returns whether `ready` held.
  template <typename Ready, typename Reader>
  bool WaitThen(Ready&& ready, absl::Duration timeout, Reader&& read) {
    std::unique_lock<std::mutex> lock(mu_);
    const bool ok = changed_.wait_for(lock, absl::ToChronoMilliseconds(timeout), [&] { return ready(view_); });
    read(view_);
    return ok;
  }

  template <typename Reader>
  void Read(Reader&& read) const {
    std::lock_guard<std::mutex> lock(mu_);
    read(view_);
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable changed_;
  RequestView view_;
  std::function<void()> observer_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_REQUEST_EVENTS_H_
