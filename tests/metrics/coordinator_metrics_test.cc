// What the coordinator's hooks make of requests: outcomes by kind and code, token latencies, and the
// stages' KV from their status.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/version.h"
#include "coordinator/coordinator_metrics.h"

namespace layerpipe {
namespace {

using Clock = CoordinatorMetrics::Clock;
using std::chrono::milliseconds;

CoordinatorMetrics TwoStages() {
  return CoordinatorMetrics({"10.0.0.1:7001", "10.0.0.2:7001"}, {{0, 24}, {24, 48}});
}

bool Has(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

TEST(CoordinatorMetrics, TokensGiveFirstTokenAndInterTokenLatencies) {
  CoordinatorMetrics m({"a:1"}, {{0, 4}});
  Request r;
  r.created = Clock::time_point() + std::chrono::hours(1);
  // Tokens 250 ms, 500 ms and 1 s after arrival, as Pipeline::HandleToken reports them.
  for (auto at : {milliseconds(250), milliseconds(500), milliseconds(1000)}) {
    const Clock::time_point now = r.created + at;
    m.OnToken(r, now);
    if (!r.first_token) r.first_token = now;
    r.last_token = now;
  }
  const std::string text = m.registry().Render();
  EXPECT_TRUE(Has(text, "layerpipe_generated_tokens_total 3")) << text;
  EXPECT_TRUE(Has(text, "layerpipe_time_to_first_token_seconds_count 1")) << text;
  EXPECT_TRUE(Has(text, "layerpipe_time_to_first_token_seconds_sum 0.25")) << text;
  EXPECT_TRUE(Has(text, "layerpipe_time_to_first_token_seconds_bucket{le=\"0.256\"} 1")) << text;
  EXPECT_TRUE(Has(text, "layerpipe_time_to_first_token_seconds_bucket{le=\"0.128\"} 0")) << text;
  EXPECT_TRUE(Has(text, "layerpipe_inter_token_latency_seconds_count 2")) << text;
  EXPECT_TRUE(Has(text, "layerpipe_inter_token_latency_seconds_sum 0.75")) << text;
}

TEST(CoordinatorMetrics, RequestsCountedByKindAndCode) {
  CoordinatorMetrics m = TwoStages();
  auto finish = [&](RequestKind kind, const std::string& reason, absl::Status error) {
    Request r;
    r.kind = kind;
    r.finish_reason = reason;
    r.error = error;
    r.finished = r.created + milliseconds(20);
    m.OnFinished(r);
  };
  finish(RequestKind::kGenerate, "length", absl::OkStatus());
  finish(RequestKind::kGenerate, "stop", absl::OkStatus());
  finish(RequestKind::kGenerate, "cancelled", absl::OkStatus());
  finish(RequestKind::kGenerate, "cancelled", absl::UnavailableError("shutting down"));
  finish(RequestKind::kScore, "stop", absl::OkStatus());
  finish(RequestKind::kScore, "error", absl::InvalidArgumentError("bad"));
  m.OnSubmit(RequestKind::kGenerate, 12, absl::ResourceExhaustedError("too big"));
  m.OnSubmit(RequestKind::kGenerate, 7, absl::OkStatus());
  m.OnSubmit(RequestKind::kScore, 5, absl::OkStatus());
  m.OnRecovery();
  const std::string text = m.registry().Render();
  for (const char* line : {
           "layerpipe_requests_total{code=\"OK\",kind=\"generate\"} 2",
           "layerpipe_requests_total{code=\"CANCELLED\",kind=\"generate\"} 1",
           "layerpipe_requests_total{code=\"UNAVAILABLE\",kind=\"generate\"} 1",
           "layerpipe_requests_total{code=\"RESOURCE_EXHAUSTED\",kind=\"generate\"} 1",
           "layerpipe_requests_total{code=\"OK\",kind=\"score\"} 1",
           "layerpipe_requests_total{code=\"INVALID_ARGUMENT\",kind=\"score\"} 1",
           "layerpipe_request_duration_seconds_count{kind=\"generate\"} 4",
           "layerpipe_request_duration_seconds_count{kind=\"score\"} 2",
           "layerpipe_prompt_tokens_total 12",
           "layerpipe_recoveries_total 1",
       }) {
    EXPECT_TRUE(Has(text, line)) << line << " not in\n" << text;
  }
}

TEST(CoordinatorMetrics, LevelsAndStagesFromTheirSources) {
  CoordinatorMetrics m = TwoStages();
  CoordinatorMetrics::Levels levels{3, 2, 1, true};
  m.ReadLevelsWith([&] { return levels; });
  internal::v1::WorkerStatus status;
  status.set_kv_capacity_bytes(1000);
  status.set_kv_bytes_used(300);
  status.set_sequences(2);
  status.set_compute_ms_total(1500);
  status.set_transfer_ms_total(250);
  m.OnStageStatus(1, &status);
  m.OnStageStatus(0, nullptr);
  m.OnStageStatus(5, &status);  // no such stage: ignored
  const std::string text = m.registry().Render();
  for (const char* line : {
           "layerpipe_queue_depth 3",
           "layerpipe_running_sequences 2",
           "layerpipe_steps_in_flight 1",
           "layerpipe_ready 1",
           "layerpipe_stage_up{stage=\"0\"} 0",
           "layerpipe_stage_up{stage=\"1\"} 1",
           "layerpipe_stage_kv_bytes_used{stage=\"1\"} 300",
           "layerpipe_stage_kv_bytes_free{stage=\"1\"} 700",
           "layerpipe_stage_sequences{stage=\"1\"} 2",
           "layerpipe_stage_compute_seconds_total{stage=\"1\"} 1.5",
           "layerpipe_stage_transfer_seconds_total{stage=\"1\"} 0.25",
           "# TYPE layerpipe_stage_compute_seconds_total counter",
           "layerpipe_stage_info{address=\"10.0.0.2:7001\",first_layer=\"24\",last_layer=\"47\",stage=\"1\"} 1",
       }) {
    EXPECT_TRUE(Has(text, line)) << line << " not in\n" << text;
  }
  levels.ready = false;
  EXPECT_TRUE(Has(m.registry().Render(), "layerpipe_ready 0"));
}

std::string Refused(const std::string& reason, int n) {
  return "layerpipe_requests_refused_total{reason=\"" + reason + "\"} " + std::to_string(n);
}

TEST(CoordinatorMetrics, RefusalsCountedByReasonEveryReasonFromZero) {
  CoordinatorMetrics m = TwoStages();
  const std::vector<std::string> all = {"unauthenticated", "rate_limited", "resource_exhausted", "invalid",
                                        "too_long",        "not_found",    "unavailable",        "other"};
  ASSERT_EQ(std::size(kRefusalReasons), all.size());
  std::string text = m.registry().Render();
  EXPECT_TRUE(Has(text, "# TYPE layerpipe_requests_refused_total counter")) << text;
  for (const std::string& reason : all) EXPECT_TRUE(Has(text, Refused(reason, 0))) << reason << " not in\n" << text;

  m.OnRefused("unauthenticated");
  m.OnRefused("unauthenticated");
  m.OnRefused("rate_limited");
  m.OnRefused(RefusalReason(absl::InvalidArgumentError("bad json")));
  m.OnRefused(RefusalReason(absl::OutOfRangeError("prompt too long")));
  m.OnRefused(RefusalReason(absl::OutOfRangeError("max_tokens too big")));
  m.OnRefused(RefusalReason(absl::InternalError("?")));
  m.OnRefused("no such reason");  // kept out of the label set: counts as other
  text = m.registry().Render();
  for (const std::string& line : {Refused("unauthenticated", 2), Refused("rate_limited", 1), Refused("invalid", 1),
                                  Refused("too_long", 2), Refused("other", 2), Refused("not_found", 0),
                                  Refused("unavailable", 0), Refused("resource_exhausted", 0)}) {
    EXPECT_TRUE(Has(text, line)) << line << " not in\n" << text;
  }
  EXPECT_EQ(text.find("no such reason"), std::string::npos);
  // Refusals are not requests that reached the pipeline.
  EXPECT_TRUE(Has(text, "layerpipe_requests_total{code=\"OK\",kind=\"generate\"} 0")) << text;
}

TEST(CoordinatorMetrics, RefusedFromManyThreads) {
  CoordinatorMetrics m({"a:1"}, {{0, 4}});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) m.OnRefused(i % 2 == 0 ? "invalid" : "unavailable");
    });
  }
  for (auto& t : threads) t.join();
  const std::string text = m.registry().Render();
  EXPECT_TRUE(Has(text, Refused("invalid", 2000))) << text;
  EXPECT_TRUE(Has(text, Refused("unavailable", 2000))) << text;
}

TEST(RefusalReason, MapsEveryCode) {
  using absl::StatusCode;
  const std::vector<std::pair<StatusCode, std::string>> cases = {
      {StatusCode::kUnauthenticated, "unauthenticated"},
      {StatusCode::kPermissionDenied, "unauthenticated"},
      {StatusCode::kResourceExhausted, "resource_exhausted"},
      {StatusCode::kInvalidArgument, "invalid"},
      {StatusCode::kFailedPrecondition, "invalid"},
      {StatusCode::kOutOfRange, "too_long"},
      {StatusCode::kNotFound, "not_found"},
      {StatusCode::kUnavailable, "unavailable"},
      {StatusCode::kOk, "other"},
      {StatusCode::kCancelled, "other"},
      {StatusCode::kUnknown, "other"},
      {StatusCode::kDeadlineExceeded, "other"},
      {StatusCode::kAlreadyExists, "other"},
      {StatusCode::kAborted, "other"},
      {StatusCode::kUnimplemented, "other"},
      {StatusCode::kInternal, "other"},
      {StatusCode::kDataLoss, "other"},
  };
  for (const auto& [code, reason] : cases) {
    EXPECT_EQ(RefusalReason(absl::Status(code, "x")), reason) << absl::StatusCodeToString(code);
    EXPECT_NE(std::find(std::begin(kRefusalReasons), std::end(kRefusalReasons), reason), std::end(kRefusalReasons));
  }
}

TEST(CoordinatorMetrics, ExportsBuildInfoAndProcessMetrics) {
  const std::string text = TwoStages().registry().Render();
  EXPECT_TRUE(Has(text, std::string("layerpipe_build_info{version=\"") + Version() + "\"} 1")) << text;
  for (const char* type_line :
       {"# TYPE process_resident_memory_bytes gauge", "# TYPE process_virtual_memory_bytes gauge",
        "# TYPE process_cpu_seconds_total counter", "# TYPE process_open_fds gauge", "# TYPE process_max_fds gauge",
        "# TYPE process_start_time_seconds gauge"}) {
    EXPECT_TRUE(Has(text, type_line)) << type_line << " not in\n" << text;
  }
}

}  // namespace
}  // namespace layerpipe
