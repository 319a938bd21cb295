// Drives the worker pipeline: assigns layer ranges, admits requests (scheduling/kv_admission.h), sends
// the steps the scheduler plans (scheduling/scheduler.h) to stage 0, applies the results the last stage
// reports, publishes each request's progress to its clients (request_events.h), and rebuilds everything
// after a fault (recovery.cc). One private lock guards the scheduling state; clients never take it.
#ifndef LAYERPIPE_COORDINATOR_PIPELINE_H_
#define LAYERPIPE_COORDINATOR_PIPELINE_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/security/credentials.h>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/scheduling/planner.h"
#include "coordinator/request.h"
#include "coordinator/scheduling/kv_admission.h"
#include "coordinator/scheduling/scheduler.h"
#include "engine/model/config.h"
#include "engine/model/precision.h"
#include "engine/model/weight_matrix.h"
#include "proto/internal.grpc.pb.h"

namespace layerpipe {

struct PipelineOptions {
  std::string model_dir;
  std::vector<std::string> workers;  // pipeline order
  std::vector<LayerRange> ranges;
  Precision precision = Precision::kBf16;
  WeightFormat quantize = WeightFormat::kBf16;  // decoder matrices quantized at load (kBf16: as stored)
  WeightFormat quantize_head = WeightFormat::kBf16;  // the embedding / tied head likewise
  int64_t prefill_chunk = 256;
  int max_batch = 64;                // decode slices per step
  absl::Duration recovery_deadline = absl::Seconds(30);
  absl::Duration step_timeout = absl::Seconds(120);
  absl::Duration health_interval = absl::Seconds(1);
  // How the coordinator dials the workers (mutual TLS when set up); null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> worker_credentials;
};

// 16 random bytes: what stages and coordinator of one epoch share (AssignRequest.epoch_secret).
std::string NewEpochSecret();

class Pipeline {
 public:
  Pipeline(const ModelConfig& config, PipelineOptions options);
  ~Pipeline();

  // Assigns every stage its range (retrying until `timeout` while workers start) and starts driving.
  // `self_address` is where the last stage reports (this coordinator's StepSink).
  absl::Status Start(const std::string& self_address, absl::Duration timeout);
  void Stop();

  // Graceful shutdown: new requests are refused with UNAVAILABLE while admitted and queued ones run to
  // completion, for at most `timeout`. True when everything finished.
  bool Drain(absl::Duration timeout);

  // Admission: RESOURCE_EXHAUSTED with the numbers when the request can never fit a stage's KV
  // capacity; otherwise it is queued until it fits.
  absl::Status Submit(std::shared_ptr<Request> request);
  void Cancel(const std::shared_ptr<Request>& request);

  // From StepSink.
  void OnStepDone(const internal::v1::StepResult& result);

  v1::ClusterStatusResponse Status();
  bool ready() const { return ready_.load(); }

  // What /metrics serves (docs/metrics.md).
  MetricsRegistry& metrics() { return metrics_.registry(); }
  // A request the API refused before submitting it (layerpipe_requests_refused_total).
  void OnRefused(absl::string_view reason) { metrics_.OnRefused(reason); }

 private:
  struct Stage {
    std::string address;
    LayerRange range;
    std::unique_ptr<internal::v1::Worker::Stub> stub;
  };
  struct InFlightStep {
    uint64_t step_id;
    std::vector<std::shared_ptr<Request>> requests;  // per slice
    std::vector<int64_t> counts;                     // tokens per slice
    std::chrono::steady_clock::time_point sent;
  };

  void Run();  // the scheduler thread
  // recovery.cc: probing the stages, (re)assigning them, and replaying after a fault.
  void HealthLoop();
  absl::Status AssignAll(uint64_t epoch, const std::string& secret, absl::Duration rpc_deadline);
  void Recover(std::unique_lock<std::mutex>& lock, const std::string& why);

  // Under mu_.
  bool NextStep(internal::v1::StepFrame* frame, InFlightStep* step);
  void ApplyResult(const internal::v1::StepResult& result);
  // Stage 0 did not take a step.
  void RefusedByFirstStage(uint64_t step_id, const grpc::Status& status);
  // Whether a stage's refusal of a step holds for every replay of it.
  static bool RefusedForGood(absl::StatusCode code);
  // Ends every request of `step` with `error`.
  void FailStep(InFlightStep& step, const absl::Status& error);
  void HandleToken(Request& r, const internal::v1::SliceResult& s);
  void Finish(Request& r, const std::string& reason, absl::Status error);
  void Admit();
  void FinishAll(const std::string& reason, const absl::Status& error);  // every admitted and queued request
  absl::Status Enqueue(std::shared_ptr<Request> request);  // Submit, but for counting its outcome

  const ModelConfig config_;
  const PipelineOptions opt_;
  std::vector<Stage> stages_;
  std::string self_address_;

  std::mutex mu_;
  std::condition_variable wake_;     // the scheduler
  std::condition_variable idle_;     // Drain: nothing admitted or queued
  KvAdmission admission_;                                 // the stages' budgets and the queue
  Scheduler scheduler_;
  std::vector<std::shared_ptr<Request>> running_;         // admitted, not done
  std::deque<internal::v1::StepResult> results_;
  std::map<uint64_t, InFlightStep> in_flight_;
  std::vector<uint64_t> pending_release_;
  std::string fault_;  // set by anyone who notices one; the scheduler recovers
  uint64_t epoch_ = 0;
  std::string epoch_secret_;  // AssignRequest.epoch_secret of epoch_
  uint64_t next_step_ = 1;
  bool stopping_ = false;
  bool draining_ = false;  // this coordinator is shutting down
  std::atomic<bool> ready_{false};
  std::thread scheduler_thread_, health_;
  CoordinatorMetrics metrics_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_PIPELINE_H_
