// Drives the worker pipeline: assigns layer ranges, admits requests against each stage's KV capacity,
// builds steps (continuous batching: every ready decode token plus at most one prefill chunk), keeps
// up to one step in flight per stage, collects sampled ids, and rebuilds everything after a fault.
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
#include "coordinator/planner.h"
#include "coordinator/request.h"
#include "engine/model/config.h"
#include "engine/model/precision.h"
#include "proto/layerpipe.grpc.pb.h"

namespace layerpipe {

struct PipelineOptions {
  std::string model_dir;
  std::vector<std::string> workers;  // pipeline order
  std::vector<LayerRange> ranges;
  Precision precision = Precision::kBf16;
  int64_t prefill_chunk = 256;
  int max_batch = 64;                // decode slices per step
  absl::Duration recovery_deadline = absl::Seconds(30);
  absl::Duration step_timeout = absl::Seconds(120);
  absl::Duration health_interval = absl::Seconds(1);
  // How the coordinator dials the workers (mutual TLS when set up); null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> worker_credentials;
};

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
  void OnStepDone(const v1::StepResult& result);

  // Waits until `pred` holds (checked under the pipeline's lock) or `timeout` passes.
  template <typename Pred>
  bool WaitFor(Pred pred, absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return updated_.wait_for(lock, absl::ToChronoMilliseconds(timeout), pred);
  }
  std::mutex& mutex() { return mu_; }

  v1::ClusterStatusResponse Status();
  bool ready() const { return ready_.load(); }

  // What /metrics serves (docs/metrics.md).
  MetricsRegistry& metrics() { return metrics_.registry(); }

 private:
  struct Stage {
    std::string address;
    LayerRange range;
    std::unique_ptr<v1::Worker::Stub> stub;
    int64_t kv_capacity = 0;
    int64_t kv_reserved = 0;
    bool draining = false;  // the worker is shutting down: admit nothing until it is replaced
  };
  struct InFlightStep {
    uint64_t step_id;
    std::vector<std::shared_ptr<Request>> requests;  // per slice
    std::vector<int64_t> counts;                     // tokens per slice
    std::chrono::steady_clock::time_point sent;
  };

  void Run();           // the scheduler thread
  void HealthLoop();    // probes every stage
  absl::Status AssignAll(uint64_t epoch, absl::Duration rpc_deadline);
  bool BuildStep(v1::StepFrame* frame, InFlightStep* step);  // under mu_
  void ApplyResult(const v1::StepResult& result);            // under mu_
  void HandleToken(Request& r, const v1::SliceResult& s);    // under mu_
  void Finish(Request& r, const std::string& reason, absl::Status error);  // under mu_
  void Admit();                                              // under mu_
  void Recover(std::unique_lock<std::mutex>& lock, const std::string& why);
  absl::Status Enqueue(std::shared_ptr<Request> request);  // Submit, but for counting its outcome

  const ModelConfig config_;
  const PipelineOptions opt_;
  std::vector<Stage> stages_;
  std::string self_address_;

  std::mutex mu_;
  std::condition_variable wake_;     // the scheduler
  std::condition_variable updated_;  // request waiters
  std::deque<std::shared_ptr<Request>> queue_;            // waiting for admission
  std::vector<std::shared_ptr<Request>> running_;         // admitted, not done
  std::deque<v1::StepResult> results_;
  std::map<uint64_t, InFlightStep> in_flight_;
  std::vector<uint64_t> pending_release_;
  std::string fault_;  // set by anyone who notices one; the scheduler recovers
  uint64_t epoch_ = 0;
  uint64_t next_step_ = 1;
  size_t prefill_rr_ = 0;
  bool stopping_ = false;
  bool draining_ = false;  // this coordinator is shutting down
  std::atomic<bool> ready_{false};
  std::thread scheduler_, health_;
  CoordinatorMetrics metrics_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_PIPELINE_H_
