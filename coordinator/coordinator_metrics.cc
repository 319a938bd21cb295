#include "coordinator/coordinator_metrics.h"

#include <utility>

#include "common/process_metrics.h"

namespace layerpipe {
namespace {

const char* KindName(RequestKind kind) { return kind == RequestKind::kScore ? "score" : "generate"; }

double Seconds(Request::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// 1 ms .. ~33 s: time to first token and queue wait (a long prompt prefills for a while).
std::vector<double> LatencyBuckets() { return ExponentialBuckets(0.001, 2, 16); }
// 1 ms .. ~4 s: the gap between two tokens of a sequence is about one trip down the pipeline.
std::vector<double> InterTokenBuckets() { return ExponentialBuckets(0.001, 2, 13); }
// 10 ms .. ~11 min.
std::vector<double> DurationBuckets() { return ExponentialBuckets(0.01, 2, 17); }

}  // namespace

static_assert(kRefusalReasons[std::size(kRefusalReasons) - 1] == "other", "OnRefused counts unknown reasons last");

std::string RefusalReason(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return "unauthenticated";
    case absl::StatusCode::kResourceExhausted:
      return "resource_exhausted";
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
      return "invalid";
    case absl::StatusCode::kOutOfRange:
      return "too_long";
    case absl::StatusCode::kNotFound:
      return "not_found";
    case absl::StatusCode::kUnavailable:
      return "unavailable";
    default:
      return "other";
  }
}

CoordinatorMetrics::CoordinatorMetrics(const std::vector<std::string>& addresses,
                                       const std::vector<LayerRange>& ranges)
    : prompt_tokens_(registry_.GetCounter("layerpipe_prompt_tokens_total",
                                          "Prompt tokens of requests the pipeline accepted (generate and score).")),
      generated_tokens_(registry_.GetCounter("layerpipe_generated_tokens_total", "Tokens sampled for clients.")),
      recoveries_(registry_.GetCounter("layerpipe_recoveries_total",
                                       "Pipeline faults handled by re-assigning every stage and replaying.")),
      prefix_hits_(registry_.GetCounter("layerpipe_prefix_cache_lookups_total",
                                        "Requests whose prompt the prefix cache could cut, by whether they "
                                        "started from a kept prefix.",
                                        {{"result", "hit"}})),
      prefix_misses_(registry_.GetCounter("layerpipe_prefix_cache_lookups_total",
                                          "Requests whose prompt the prefix cache could cut, by whether they "
                                          "started from a kept prefix.",
                                          {{"result", "miss"}})),
      prefix_cached_tokens_(registry_.GetCounter("layerpipe_prefix_cache_cached_tokens_total",
                                                 "Prompt tokens taken from kept prefixes instead of prefilled.")),
      ttft_(registry_.GetHistogram("layerpipe_time_to_first_token_seconds",
                                   "From a generate request's arrival to its first sampled token.", LatencyBuckets())),
      inter_token_(registry_.GetHistogram("layerpipe_inter_token_latency_seconds",
                                          "Between consecutive sampled tokens of one sequence.", InterTokenBuckets())),
      queue_wait_(registry_.GetHistogram("layerpipe_queue_wait_seconds",
                                         "From a request's arrival to its admission (KV reserved on every stage).",
                                         LatencyBuckets())) {
  for (RequestKind kind : {RequestKind::kGenerate, RequestKind::kScore}) {
    duration_[KindIndex(kind)] =
        &registry_.GetHistogram("layerpipe_request_duration_seconds", "From a request's arrival to its end.",
                                DurationBuckets(), {{"kind", KindName(kind)}});
    Requests(kind, absl::StatusCode::kOk);  // present (at 0) from the start
  }
  for (size_t i = 0; i < std::size(kRefusalReasons); ++i) {
    refused_[i] = &registry_.GetCounter("layerpipe_requests_refused_total",
                                        "Requests refused before they reached the pipeline, by reason.",
                                        {{"reason", std::string(kRefusalReasons[i])}});
  }
  RegisterBuildInfo(registry_);
  RegisterProcessMetrics(registry_);
  registry_.AddCallback("layerpipe_tokens_per_second", "Generated tokens per second over the last 10 s.",
                        MetricType::kGauge, {}, [this] { return token_rate_.PerSecond(); });

  for (size_t s = 0; s < addresses.size(); ++s) {
    const std::string index = std::to_string(s);
    const MetricLabels stage = {{"stage", index}};
    registry_
        .GetGauge("layerpipe_stage_info", "Each stage's worker address and layer range (value 1).",
                  {{"stage", index},
                   {"address", addresses[s]},
                   {"first_layer", std::to_string(ranges[s].begin)},
                   {"last_layer", std::to_string(ranges[s].end - 1)}})
        .Set(1);
    StageMetrics m;
    m.up = &registry_.GetGauge("layerpipe_stage_up", "1 when the stage's worker answered its last health probe.",
                               stage);
    m.kv_used = &registry_.GetGauge("layerpipe_stage_kv_bytes_used",
                                    "KV cache bytes the stage's worker holds, as of its last health probe.", stage);
    m.kv_free = &registry_.GetGauge("layerpipe_stage_kv_bytes_free",
                                    "KV budget the stage's worker has left, as of its last health probe.", stage);
    m.sequences = &registry_.GetGauge("layerpipe_stage_sequences",
                                      "Sequences the stage's worker holds, as of its last health probe.", stage);
    m.compute_seconds = std::make_unique<Gauge>();
    m.transfer_seconds = std::make_unique<Gauge>();
    const Gauge* compute = m.compute_seconds.get();
    const Gauge* transfer = m.transfer_seconds.get();
    registry_.AddCallback("layerpipe_stage_compute_seconds_total",
                          "The stage's worker's compute time, as of its last health probe (restarts reset it).",
                          MetricType::kCounter, stage, [compute] { return compute->Value(); });
    registry_.AddCallback("layerpipe_stage_transfer_seconds_total",
                          "The stage's worker's send time, as of its last health probe (restarts reset it).",
                          MetricType::kCounter, stage, [transfer] { return transfer->Value(); });
    stages_.push_back(std::move(m));
  }
}

void CoordinatorMetrics::ReadLevelsWith(std::function<Levels()> read) {
  registry_.AddCallback("layerpipe_queue_depth", "Requests waiting for admission.", MetricType::kGauge, {},
                        [read] { return static_cast<double>(read().queued); });
  registry_.AddCallback("layerpipe_running_sequences", "Admitted requests not yet finished.", MetricType::kGauge, {},
                        [read] { return static_cast<double>(read().running); });
  registry_.AddCallback("layerpipe_steps_in_flight", "Steps sent down the pipeline and not yet back.",
                        MetricType::kGauge, {}, [read] { return static_cast<double>(read().steps_in_flight); });
  registry_.AddCallback("layerpipe_ready", "1 while every stage is assigned and requests are served.",
                        MetricType::kGauge, {}, [read] { return read().ready ? 1.0 : 0.0; });
  registry_.AddCallback("layerpipe_prefix_cache_entries", "Prompt prefixes the stages keep (or are making).",
                        MetricType::kGauge, {}, [read] { return static_cast<double>(read().prefix_entries); });
  registry_.AddCallback("layerpipe_prefix_cache_evictions_total",
                        "Kept prefixes evicted (least recently used first) for room.", MetricType::kCounter, {},
                        [read] { return static_cast<double>(read().prefix_evictions); });
  for (size_t s = 0; s < stages_.size(); ++s) {
    registry_.AddCallback("layerpipe_prefix_cache_bytes",
                          "KV bytes the stage's kept prefixes take, as the coordinator counts them.",
                          MetricType::kGauge, {{"stage", std::to_string(s)}}, [read, s] {
                            const Levels l = read();
                            return s < l.prefix_bytes.size() ? static_cast<double>(l.prefix_bytes[s]) : 0.0;
                          });
  }
}

Counter& CoordinatorMetrics::Requests(RequestKind kind, absl::StatusCode code) {
  return registry_.GetCounter("layerpipe_requests_total",
                              "Requests that reached the pipeline, by kind and final status code (refusals too).",
                              {{"kind", KindName(kind)}, {"code", absl::StatusCodeToString(code)}});
}

void CoordinatorMetrics::OnSubmit(RequestKind kind, int64_t prompt_tokens, const absl::Status& status) {
  if (status.ok()) {
    prompt_tokens_.Increment(static_cast<double>(prompt_tokens));
  } else {
    Requests(kind, status.code()).Increment();
  }
}

void CoordinatorMetrics::OnAdmitted(const Request& r) {
  if (r.admitted) queue_wait_.Observe(Seconds(*r.admitted - r.created));
}

void CoordinatorMetrics::OnToken(const Request& r, Clock::time_point now) {
  generated_tokens_.Increment();
  token_rate_.Add(1, now);
  if (!r.first_token) {
    ttft_.Observe(Seconds(now - r.created));
  } else if (r.last_token) {
    inter_token_.Observe(Seconds(now - *r.last_token));
  }
}

void CoordinatorMetrics::OnFinished(const Request& r) {
  absl::StatusCode code = r.error.code();
  if (r.error.ok() && r.finish_reason == "cancelled") code = absl::StatusCode::kCancelled;
  Requests(r.kind, code).Increment();
  if (r.finished) duration_[KindIndex(r.kind)]->Observe(Seconds(*r.finished - r.created));
}

void CoordinatorMetrics::OnRecovery() { recoveries_.Increment(); }

void CoordinatorMetrics::OnRefused(absl::string_view reason) {
  size_t i = 0;
  while (i + 1 < std::size(kRefusalReasons) && kRefusalReasons[i] != reason) ++i;  // the last is "other"
  refused_[i]->Increment();
}

void CoordinatorMetrics::OnPrefixLookup(int64_t cached_tokens) {
  if (cached_tokens > 0) {
    prefix_hits_.Increment();
    prefix_cached_tokens_.Increment(static_cast<double>(cached_tokens));
  } else {
    prefix_misses_.Increment();
  }
}

void CoordinatorMetrics::OnStageStatus(size_t stage, const internal::v1::WorkerStatus* status) {
  if (stage >= stages_.size()) return;
  StageMetrics& m = stages_[stage];
  m.up->Set(status != nullptr ? 1 : 0);
  if (status == nullptr) return;
  m.kv_used->Set(static_cast<double>(status->kv_bytes_used()));
  m.kv_free->Set(
      static_cast<double>(status->kv_capacity_bytes() - status->kv_bytes_used() - status->prefix_bytes()));
  m.sequences->Set(status->sequences());
  m.compute_seconds->Set(status->compute_ms_total() / 1000.0);
  m.transfer_seconds->Set(status->transfer_ms_total() / 1000.0);
}

}  // namespace layerpipe
