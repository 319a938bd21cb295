#include "worker/worker_metrics.h"

#include <string>
#include <utility>

#include "common/process_metrics.h"

namespace layerpipe {
namespace {

// 1 ms .. ~16 s: a decode step of a small range up to a long prefill chunk on a big one.
const std::vector<double>& StepBuckets() {
  static const std::vector<double> b = ExponentialBuckets(0.001, 2, 15);
  return b;
}

}  // namespace

WorkerMetrics::WorkerMetrics(std::function<Levels()> read)
    : steps_(registry_.GetCounter("layerpipe_worker_steps_total", "Steps this stage ran (failed ones included).")),
      compute_seconds_(registry_.GetCounter("layerpipe_worker_compute_seconds_total",
                                            "Time the compute thread spent running steps.")),
      step_seconds_(registry_.GetHistogram("layerpipe_worker_step_seconds", "Compute time of one step.",
                                           StepBuckets())) {
  auto level = [&, read](std::string_view name, std::string_view help, MetricType type, MetricLabels labels,
                         double (*pick)(const Levels&)) {
    registry_.AddCallback(name, help, type, labels, [read, pick] { return pick(read()); });
  };
  level("layerpipe_worker_stage", "Pipeline stage this worker serves; -1 before its first assignment.",
        MetricType::kGauge, {}, [](const Levels& l) { return static_cast<double>(l.stage); });
  level("layerpipe_worker_kv_bytes_used", "KV cache bytes held: sliding-window rings and full-attention pages.",
        MetricType::kGauge, {{"kind", "sliding"}},
        [](const Levels& l) { return static_cast<double>(l.kv_sliding_bytes); });
  level("layerpipe_worker_kv_bytes_used", "KV cache bytes held: sliding-window rings and full-attention pages.",
        MetricType::kGauge, {{"kind", "full"}}, [](const Levels& l) { return static_cast<double>(l.kv_full_bytes); });
  level("layerpipe_worker_kv_bytes_free", "KV budget not in use (sliding and full share one budget).",
        MetricType::kGauge, {}, [](const Levels& l) {
          return static_cast<double>(l.kv_capacity_bytes - l.kv_sliding_bytes - l.kv_full_bytes - l.prefix_bytes);
        });
  level("layerpipe_worker_prefix_cache_bytes",
        "KV bytes of kept prefixes (the prefix cache), each page counted once: not in kv_bytes_used.",
        MetricType::kGauge, {}, [](const Levels& l) { return static_cast<double>(l.prefix_bytes); });
  level("layerpipe_worker_prefix_cache_budget_bytes", "Of the KV budget, what kept prefixes may take.",
        MetricType::kGauge, {}, [](const Levels& l) { return static_cast<double>(l.prefix_budget_bytes); });
  level("layerpipe_worker_prefix_cache_entries", "Prefixes this stage keeps.", MetricType::kGauge, {},
        [](const Levels& l) { return static_cast<double>(l.prefixes); });
  level("layerpipe_worker_prefix_cache_self_evictions_total",
        "Kept prefixes the stage evicted itself to stay in its budget (the coordinator evicts them first; "
        "nonzero means the two counts disagree).",
        MetricType::kCounter, {}, [](const Levels& l) { return static_cast<double>(l.prefix_evictions); });
  level("layerpipe_worker_kv_bytes_capacity", "KV budget of the current assignment.", MetricType::kGauge, {},
        [](const Levels& l) { return static_cast<double>(l.kv_capacity_bytes); });
  level("layerpipe_worker_sequences", "Sequences whose KV this stage holds.", MetricType::kGauge, {},
        [](const Levels& l) { return static_cast<double>(l.sequences); });
  level("layerpipe_worker_queued_steps", "Accepted frames waiting for the compute thread.", MetricType::kGauge, {},
        [](const Levels& l) { return static_cast<double>(l.queued_steps); });
  level("layerpipe_worker_pending_sends", "Frames and results not yet sent to the next stage or the coordinator.",
        MetricType::kGauge, {}, [](const Levels& l) { return static_cast<double>(l.pending_sends); });
  level("layerpipe_worker_idle_seconds_total",
        "Time the compute thread had a range assigned but no step to run: this stage's pipeline idle time.",
        MetricType::kCounter, {}, [](const Levels& l) { return l.idle_seconds; });
  level("layerpipe_worker_transfer_seconds_total",
        "Time spent sending frames to the next stage and results to the coordinator.", MetricType::kCounter, {},
        [](const Levels& l) { return l.transfer_seconds; });
  RegisterBuildInfo(registry_);
  RegisterProcessMetrics(registry_);
}

void WorkerMetrics::OnStep(double compute_seconds) {
  steps_.Increment();
  compute_seconds_.Increment(compute_seconds);
  step_seconds_.Observe(compute_seconds);
}

void WorkerMetrics::OnRejected(absl::StatusCode code) {
  registry_
      .GetCounter("layerpipe_worker_frames_rejected_total", "Step frames the Step RPC refused, by status code.",
                  {{"code", absl::StatusCodeToString(code)}})
      .Increment();
}

}  // namespace layerpipe
