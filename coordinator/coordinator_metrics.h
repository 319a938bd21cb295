// What the coordinator exports for Prometheus (docs/metrics.md lists every name): request outcomes,
// token counts and latencies pushed by the pipeline as they happen, the pipeline's levels read at
// scrape time, and each stage's KV and time as its worker last reported them.
#ifndef LAYERPIPE_COORDINATOR_COORDINATOR_METRICS_H_
#define LAYERPIPE_COORDINATOR_COORDINATOR_METRICS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/metrics.h"
#include "common/sliding_rate.h"
#include "coordinator/scheduling/planner.h"
#include "coordinator/request.h"
#include "proto/internal.pb.h"

namespace layerpipe {

class CoordinatorMetrics {
 public:
  using Clock = std::chrono::steady_clock;

  // The pipeline's state at one instant.
  struct Levels {
    int64_t queued = 0;   // requests waiting for admission
    int64_t running = 0;  // admitted, not finished
    int64_t steps_in_flight = 0;
    bool ready = false;
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
  Histogram& ttft_;
  Histogram& inter_token_;
  Histogram& queue_wait_;
  Histogram* duration_[2];  // by KindIndex
  SlidingRate token_rate_;
  std::vector<StageMetrics> stages_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_COORDINATOR_METRICS_H_
