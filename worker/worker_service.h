// The Worker gRPC service: control (Assign, Status) and data (Step). Step only checks and queues a
// frame; one compute thread runs the queued steps of the current epoch in step_id order, and an
// Outbox sends what they produce, in order.
//
// What the coordinator can rely on:
// - Every step of an epoch yields a StepDone. The last stage sends it on success, with a SliceResult
//   for each slice that samples, scores or returns logits (none for a frame that only releases).
// - A step that fails at a stage (refused on arrival for its content, or failed when run: position
//   mismatch, unknown sequence, KV budget, ...) makes that stage send a StepDone with error,
//   error_code and stage. The stage still frees the frame's releases and passes a frame with the same
//   step_id and releases but no slices down the pipe, so later stages keep their order; the last
//   stage then sends an empty StepDone for it. The error is always sent first (the stage's outbox
//   delivers it before the hand-off), so "the first StepDone of a step decides" is safe.
// - A frame refused on arrival has used up its step_id (ALREADY_EXISTS if sent again). Frames of
//   another epoch (FAILED_PRECONDITION), step_id 0 or too far ahead, and duplicates are refused
//   without using an id.
// - A hand-off the next stage refuses, or cannot take within the retry window, is reported as an
//   error blamed on the next stage. After an unreachable next stage, later stages never see that
//   step: the coordinator has to assign a new epoch.
#ifndef LAYERPIPE_WORKER_WORKER_SERVICE_H_
#define LAYERPIPE_WORKER_WORKER_SERVICE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/cpu/thread_pool.h"
#include "engine/backend/layer_backend.h"
#include "engine/model/precision.h"
#include "engine/model/weights.h"
#include "proto/internal.grpc.pb.h"
#include "transport/failed_links.h"
#include "transport/next_hop.h"
#include "transport/outbox.h"
#include "worker/stage.h"
#include "worker/step_sequencer.h"
#include "worker/assignment.h"
#include "worker/worker_metrics.h"
#include "worker/worker_options.h"

namespace layerpipe {

class WorkerService final : public internal::v1::Worker::Service {
 public:
  explicit WorkerService(const WorkerOptions& options);
  ~WorkerService() override;

  grpc::Status Assign(grpc::ServerContext* ctx, const internal::v1::AssignRequest* request,
                      internal::v1::AssignResponse* response) override;
  grpc::Status Status(grpc::ServerContext* ctx, const internal::v1::WorkerStatusRequest* request,
                      internal::v1::WorkerStatus* response) override;
  grpc::Status Step(grpc::ServerContext* ctx, const internal::v1::StepFrame* request, internal::v1::StepAck* response) override;
  grpc::Status OpenPeerLink(grpc::ServerContext* ctx, const internal::v1::PeerLinkRequest* request,
                            internal::v1::PeerLinkReply* response) override;

  // What Step does, for frames that arrive over another transport than gRPC: checks and queues
  // `frame` and returns the verdict the sender's outbox acts on.
  absl::Status TakeFrame(const internal::v1::StepFrame& frame);

  // Ends the compute and send threads; later RPCs are refused. Idempotent.
  void Stop();

  // Graceful shutdown: Status reports `draining` (the coordinator then admits nothing new) and steps
  // keep flowing until this stage holds no sequence and has nothing queued, or `timeout` passes.
  // True when it drained.
  bool Drain(absl::Duration timeout);

  // What /metrics serves (docs/metrics.md).
  MetricsRegistry& metrics() { return metrics_.registry(); }

 private:
  absl::StatusOr<std::shared_ptr<const ModelWeights>> WeightsFor(const internal::v1::AssignRequest& request,
                                                                 const ModelConfig& config);
  absl::Status DoAssign(const internal::v1::AssignRequest& request, internal::v1::AssignResponse* response);
  absl::Status AcceptStep(const internal::v1::StepFrame& frame);
  absl::StatusOr<internal::v1::PeerLinkReply> DoOpenPeerLink(const internal::v1::PeerLinkRequest& request);
  // compute_loop.cc: the one compute thread, running the queued steps in order.
  void ComputeLoop();
  void RecordStep(const Assignment& a, std::chrono::steady_clock::time_point start);
  void RunStep(Assignment& a, QueuedStep step);
  WorkerMetrics::Levels MetricsLevels();

  const WorkerOptions options_;
  const std::string host_name_;
  // Shared with the background joins, which may outlive an assignment.
  const std::shared_ptr<FailedDeviceLinks> failed_links_ = std::make_shared<FailedDeviceLinks>();
  const int64_t worker_kv_budget_;
  ThreadPool pool_;
  Outbox outbox_;

  std::mutex assign_mu_;  // one Assign at a time (loading can take long; Step keeps flowing meanwhile)

  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<Assignment> assignment_;  // null until the first Assign
  StepSequencer sequencer_;
  bool stopping_ = false;
  bool assigning_ = false;  // an Assign waits for the compute thread to go idle
  bool busy_ = false;       // the compute thread is running a step
  bool draining_ = false;
  // Mirrors of the stage's state for Status (the stage belongs to the compute thread).
  int64_t kv_bytes_used_ = 0;
  int64_t prefix_bytes_ = 0;  // the stage's kept prefixes (as of its last step)
  int prefixes_ = 0;
  int64_t prefix_evictions_ = 0;
  int sequences_ = 0;
  int64_t kv_sliding_bytes_used_ = 0;
  // Pipeline idle time: the compute thread waiting with a range assigned and no step to run.
  double idle_seconds_ = 0;
  std::optional<std::chrono::steady_clock::time_point> idle_since_;  // set while idle
  double compute_ms_total_ = 0;
  int64_t steps_ = 0;

  WorkerMetrics metrics_{[this] { return MetricsLevels(); }};

  std::mutex stop_mu_;  // Stop() may be called from several threads
  std::thread compute_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_WORKER_WORKER_SERVICE_H_
