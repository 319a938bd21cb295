// What a worker exports for Prometheus (docs/metrics.md lists every name). Counts are pushed by the
// compute and RPC paths; levels (KV, sequences, queues, idle time) are read from the service at
// scrape time; the build's version and the process's resources too (common/process_metrics.h).
#ifndef LAYERPIPE_WORKER_WORKER_METRICS_H_
#define LAYERPIPE_WORKER_WORKER_METRICS_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "common/metrics.h"

namespace layerpipe {

class WorkerMetrics {
 public:
  // The service's state at one instant.
  struct Levels {
    int stage = -1;  // -1: no range assigned
    int64_t kv_sliding_bytes = 0;
    int64_t kv_full_bytes = 0;
    int64_t kv_capacity_bytes = 0;
    int64_t prefix_budget_bytes = 0;  // of kv_capacity_bytes
    int64_t prefix_bytes = 0;         // kept prefixes (not in kv_*_bytes)
    int prefixes = 0;
    int64_t prefix_evictions = 0;     // by the stage itself (the coordinator's drops are not counted)
    int sequences = 0;
    int64_t queued_steps = 0;    // accepted frames waiting for the compute thread
    int64_t pending_sends = 0;   // frames and results the outbox has not sent yet
    double idle_seconds = 0;     // see layerpipe_worker_idle_seconds_total
    double transfer_seconds = 0;
  };

  // `read` is called at scrape time, once per exported level, without the registry's lock held; it
  // must stay callable while the registry is served.
  explicit WorkerMetrics(std::function<Levels()> read);

  MetricsRegistry& registry() { return registry_; }

  void OnStep(double compute_seconds);
  // A frame the Step RPC refused.
  void OnRejected(absl::StatusCode code);

 private:
  MetricsRegistry registry_;
  Counter& steps_;
  Counter& compute_seconds_;
  Histogram& step_seconds_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_WORKER_WORKER_METRICS_H_
