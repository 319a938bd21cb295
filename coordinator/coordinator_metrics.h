// What the coordinator exports for Prometheus (docs/metrics.md lists every name): request outcomes,
// token counts and latencies pushed by the pipeline as they happen, the pipeline's levels read at
// scrape time, each stage's KV and time as its worker last reported them, requests the API front
// ends refused, and (common/process_metrics.h) the build's version and the process's resources.
#ifndef LAYERPIPE_COORDINATOR_COORDINATOR_METRICS_H_
#define LAYERPIPE_COORDINATOR_COORDINATOR_METRICS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/metrics.h"
#include "common/sliding_rate.h"
#include "coordinator/scheduling/planner.h"
#include "coordinator/request.h"
#include "proto/internal.pb.h"

namespace layerpipe {

// The reasons layerpipe_requests_refused_total counts (every one exported from the start, at 0).
inline constexpr absl::string_view kRefusalReasons[] = {
    "unauthenticated",     // no or a bad token, or a token without the permission
    "rate_limited",        // the client gate's limits (its RESOURCE_EXHAUSTED)
    "resource_exhausted",  // any other RESOURCE_EXHAUSTED
    "invalid",             // bad arguments, unparsable requests
    "too_long",            // prompt or requested length past the limits
    "not_found",           // an unknown job or resource
    "unavailable",         // not serving
    "other",               // anything else (and any reason not in this list)
};

// The refusal reason of `status` (not OK): UNAUTHENTICATED and PERMISSION_DENIED → "unauthenticated",
// RESOURCE_EXHAUSTED → "resource_exhausted" (the caller passes "rate_limited" itself when the client
// gate refused), INVALID_ARGUMENT and FAILED_PRECONDITION → "invalid", OUT_OF_RANGE → "too_long",
// NOT_FOUND → "not_found", UNAVAILABLE → "unavailable", any other code (OK too) → "other".
std::string RefusalReason(const absl::Status& status);

class CoordinatorMetrics {
 public:
  using Clock = std::chrono::steady_clock;

  // The pipeline's state at one instant.
  struct Levels {
    int64_t queued = 0;   // requests waiting for admission
    int64_t running = 0;  // admitted, not finished
    int64_t steps_in_flight = 0;
    bool ready = false;
    // The prefix cache (scheduling/prefix_cache.h): bytes kept per stage, prefixes kept, evictions.
    std::vector<int64_t> prefix_bytes;
    int64_t prefix_entries = 0;
    int64_t prefix_evictions = 0;
  };

  // One entry per stage, in pipeline order.
  CoordinatorMetrics(const std::vector<std::string>& addresses, const std::vector<LayerRange>& ranges);

  // `read` is called at scrape time, once per exported level, without the registry's lock held; it
  // must stay callable while the registry is served.
  void ReadLevelsWith(std::function<Levels()> read);

  MetricsRegistry& registry() { return registry_; }

  // Every hook is thread-safe and cheap (the pipeline calls them under its lock).
  // Submit's answer: a refusal ends the request there; an accepted one counts its prompt.
  void OnSubmit(RequestKind kind, int64_t prompt_tokens, const absl::Status& status);
  void OnAdmitted(const Request& r);
  // A generated token of `r`, before r.first_token / r.last_token are updated to `now`.
  void OnToken(const Request& r, Clock::time_point now);
  // After r's finish_reason, error and finished are set.
  void OnFinished(const Request& r);
  void OnRecovery();
  // A request's first slice went down the pipe: from a kept prefix of `cached_tokens` positions, or
  // (0) from the start although its prompt has cuts the prefix cache could have used.
  void OnPrefixLookup(int64_t cached_tokens);
  // A request an API front end refused before it reached the pipeline (authentication, parsing,
  // length checks, the client gate); Pipeline::Submit's own refusals count in OnSubmit instead.
  // `reason` is one of kRefusalReasons (see RefusalReason); anything else counts as "other".
  void OnRefused(absl::string_view reason);
  // A health probe of stage `stage`: its worker's status, or null when it did not answer.
  void OnStageStatus(size_t stage, const internal::v1::WorkerStatus* status);

 private:
  struct StageMetrics {
    Gauge* up;
    Gauge* kv_used;
    Gauge* kv_free;
    Gauge* sequences;
    // The worker's own running totals, exported as counters by callbacks that read these.
    std::unique_ptr<Gauge> compute_seconds;
    std::unique_ptr<Gauge> transfer_seconds;
  };

  Counter& Requests(RequestKind kind, absl::StatusCode code);
  static int KindIndex(RequestKind kind) { return kind == RequestKind::kScore ? 1 : 0; }

  MetricsRegistry registry_;
  Counter& prompt_tokens_;
  Counter& generated_tokens_;
  Counter& recoveries_;
  Counter& prefix_hits_;
  Counter& prefix_misses_;
  Counter& prefix_cached_tokens_;
  Counter* refused_[std::size(kRefusalReasons)];  // by index in kRefusalReasons
  Histogram& ttft_;
  Histogram& inter_token_;
  Histogram& queue_wait_;
  Histogram* duration_[2];  // by KindIndex
  SlidingRate token_rate_;
  std::vector<StageMetrics> stages_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_COORDINATOR_METRICS_H_
