#include "worker/worker_service.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/host_name.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/config.h"
#include "transport/hidden_codec.h"
#include "worker/byte_size.h"
#include "worker/frame_check.h"
#include "engine/model/quantize.h"

namespace layerpipe {
namespace {

// Rows (tokens) of a frame as sent, whatever its content: a linked frame's rows arrive even when the
// frame is then refused, and must be taken off the link all the same.
int64_t SentRows(const internal::v1::StepFrame& frame) {
  int64_t rows = 0;
  for (const internal::v1::StepSlice& s : frame.slices()) rows += s.ids_size();
  return rows;
}

}  // namespace

WorkerService::WorkerService(const WorkerOptions& options)
    : options_(options),
      host_name_(options.host_name.empty() ? LocalHostName("unknown-host") : options.host_name),
      worker_kv_budget_(options.kv_budget_bytes > 0 ? options.kv_budget_bytes : DefaultKvBudgetBytes()),
      pool_(options.threads > 0 ? options.threads : DefaultThreadCount()),
      outbox_(options.outbox),
      compute_([this] { ComputeLoop(); }) {}

WorkerService::~WorkerService() { Stop(); }

void WorkerService::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (assignment_) assignment_->RetireLinks();
    cv_.notify_all();
  }
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (compute_.joinable()) compute_.join();
  }
  outbox_.Stop();
}

// ------------------------------------------------------------------------------------------ control

absl::StatusOr<std::shared_ptr<const ModelWeights>> WorkerService::WeightsFor(const internal::v1::AssignRequest& request,
                                                                              const ModelConfig& config) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (assignment_ && SameWeights(assignment_->request, request)) return assignment_->weights;
  }
  // Huge pages mean a CPU stage (worker/main.cc), whose matmul kernels read the weights tiled, in either
  // precision: the same copy serves both.
  auto quantize = ParseQuantization(request.quantize());
  if (!quantize.ok()) return quantize.status();
  auto quantize_head = ParseHeadQuantization(request.quantize_head());
  if (!quantize_head.ok()) return quantize_head.status();
  auto loaded = ModelWeights::Load(request.model_dir(), config, SelectionOf(request),
                                   {.huge_pages = options_.huge_pages,
                                    .tile_layer_matrices = options_.huge_pages,
                                    .quantize = *quantize,
                                    .quantize_head = *quantize_head});
  if (!loaded.ok()) return loaded.status();
  return std::shared_ptr<const ModelWeights>(std::move(*loaded));
}

absl::Status WorkerService::DoAssign(const internal::v1::AssignRequest& in, internal::v1::AssignResponse* response) {
  internal::v1::AssignRequest request = in;
  if (request.model_dir().empty()) request.set_model_dir(options_.default_model_dir);
  if (request.model_dir().empty()) {
    return absl::InvalidArgumentError("model_dir is empty and the worker was started without --model");
  }
  if (request.precision().empty()) request.set_precision("bf16");
  if (request.quantize().empty()) request.set_quantize("none");
  if (auto q = ParseQuantization(request.quantize()); !q.ok()) return q.status();
  if (request.quantize_head().empty()) request.set_quantize_head("none");
  if (auto q = ParseHeadQuantization(request.quantize_head()); !q.ok()) return q.status();
  Precision precision;
  if (!ParsePrecision(request.precision(), &precision)) {
    return absl::InvalidArgumentError(
        absl::StrCat("precision \"", request.precision(), "\" is neither \"bf16\" nor \"fp32\""));
  }
  auto config = LoadModelConfig(request.model_dir());
  if (!config.ok()) return config.status();
  if (auto st = CheckAssign(request, *config); !st.ok()) return st;
  auto weights = WeightsFor(request, *config);
  if (!weights.ok()) return weights.status();

  request.set_precision(PrecisionName(precision));
  auto built = BuildAssignment(request, precision, *weights,
                               AssignmentContext{&options_, &pool_, host_name_, worker_kv_budget_, failed_links_});
  if (!built.ok()) return built.status();
  std::shared_ptr<Assignment> a = *std::move(built);

  std::shared_ptr<Assignment> old;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("the worker is shutting down");
    // The running step (of the old epoch) finishes first; no new one starts meanwhile. It may be
    // waiting for linked rows from a previous stage that is gone: the links go first.
    if (assignment_) assignment_->RetireLinks();
    assigning_ = true;
    cv_.wait(lock, [this] { return !busy_; });
    old = std::move(assignment_);
    assignment_ = a;
    sequencer_.Reset();
    kv_bytes_used_ = 0;
    kv_sliding_bytes_used_ = 0;
    prefix_bytes_ = 0;
    prefixes_ = 0;
    prefix_evictions_ = 0;
    sequences_ = 0;
    if (!idle_since_) idle_since_ = std::chrono::steady_clock::now();  // the compute thread is idle now
    outbox_.SetEpoch(a->epoch);
    assigning_ = false;
    cv_.notify_all();
  }
  response->set_kv_capacity_bytes(a->stage->options().kv_budget_bytes);
  response->set_prefix_cache_bytes(a->stage->options().prefix_cache_bytes);
  response->set_weight_bytes(WeightBytes(*a->weights));
  return absl::OkStatus();
}

grpc::Status WorkerService::Assign(grpc::ServerContext*, const internal::v1::AssignRequest* request,
                                   internal::v1::AssignResponse* response) {
  std::lock_guard<std::mutex> lock(assign_mu_);
  return ToGrpc(DoAssign(*request, response));
}

grpc::Status WorkerService::Status(grpc::ServerContext*, const internal::v1::WorkerStatusRequest*, internal::v1::WorkerStatus* response) {
  std::lock_guard<std::mutex> lock(mu_);
  response->set_assigned(assignment_ != nullptr);
  if (assignment_) {
    response->set_epoch(assignment_->epoch);
    response->set_layer_begin(assignment_->request.layer_begin());
    response->set_layer_end(assignment_->request.layer_end());
    response->set_kv_capacity_bytes(assignment_->stage->options().kv_budget_bytes);
    if (assignment_->next) response->set_next_hop_transport(assignment_->next->transport());
  } else {
    response->set_kv_capacity_bytes(worker_kv_budget_);
  }
  response->set_kv_bytes_used(kv_bytes_used_);
  response->set_prefix_bytes(prefix_bytes_);
  response->set_prefixes(prefixes_);
  response->set_prefix_evictions(prefix_evictions_);
  response->set_sequences(sequences_);
  response->set_draining(draining_);
  response->set_compute_ms_total(compute_ms_total_);
  response->set_transfer_ms_total(outbox_.transfer_ms_total());
  response->set_steps(steps_);
  return grpc::Status::OK;
}

// --------------------------------------------------------------------------------------------- data

grpc::Status WorkerService::Step(grpc::ServerContext*, const internal::v1::StepFrame* request, internal::v1::StepAck*) {
  return ToGrpc(TakeFrame(*request));
}

grpc::Status WorkerService::OpenPeerLink(grpc::ServerContext*, const internal::v1::PeerLinkRequest* request,
                                         internal::v1::PeerLinkReply* response) {
  auto reply = DoOpenPeerLink(*request);
  if (!reply.ok()) return ToGrpc(reply.status());
  *response = std::move(*reply);
  return grpc::Status::OK;
}

absl::StatusOr<internal::v1::PeerLinkReply> WorkerService::DoOpenPeerLink(const internal::v1::PeerLinkRequest& request) {
  std::shared_ptr<Assignment> a;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("the worker is shutting down");
    if (!assignment_) return absl::FailedPreconditionError("the worker has no layer range assigned yet");
    if (request.epoch() != assignment_->epoch) {
      return absl::FailedPreconditionError(absl::StrCat("a link for epoch ", request.epoch(),
                                                        " but the worker serves epoch ", assignment_->epoch));
    }
    a = assignment_;
  }
  const int stage = a->request.stage();
  if (request.from_stage() != stage - 1) {
    return absl::InvalidArgumentError(absl::StrCat("stage ", request.from_stage(), " offered a link to stage ",
                                                   stage, ", which only takes one from stage ", stage - 1));
  }
  internal::v1::PeerLinkReply reply;
  const std::shared_ptr<LayerBackend>& backend = a->stage->backend();
  if (!backend->device_handoff()) {
    reply.set_reason(absl::StrCat("stage ", stage, " runs on ", backend->device(), ", not a GPU"));
    return reply;
  }
  // NCCL refuses two ranks on one GPU; stages sharing one link through CUDA IPC instead.
  const PeerLinkKind kind = request.host() == host_name_ && request.device_uid() == backend->device_uid()
                                ? PeerLinkKind::kSameDevice
                                : PeerLinkKind::kAcrossDevices;
  const std::string sender = FailedDeviceLinks::SenderKey(request.host(), request.device_uid());
  if (std::optional<std::string> failed = failed_links_->Failure(sender)) {
    reply.set_reason(absl::StrCat("a device link from stage ", stage - 1, " failed before it carried a step (",
                                  *failed, "); activations come over the host transport"));
    return reply;
  }
  if (absl::Status st = a->inbox->Open(request.link_id(), kind, sender); !st.ok()) {
    if (absl::IsAlreadyExists(st)) {
      return absl::AlreadyExistsError(absl::StrCat("stage ", stage, " already has a link for epoch ", a->epoch));
    }
    return st;
  }
  reply.set_accepted(true);
  reply.set_same_device(kind == PeerLinkKind::kSameDevice);
  return reply;
}

absl::Status WorkerService::TakeFrame(const internal::v1::StepFrame& frame) {
  const absl::Status st = AcceptStep(frame);
  if (!st.ok()) metrics_.OnRejected(st.code());
  return st;
}

absl::Status WorkerService::AcceptStep(const internal::v1::StepFrame& frame) {
  const uint64_t id = frame.step_id();
  auto stale = [&](uint64_t serving) {
    return absl::FailedPreconditionError(absl::StrCat("step ", id, " belongs to epoch ", frame.epoch(),
                                                      " but the worker serves epoch ", serving));
  };
  std::shared_ptr<Assignment> a;
  absl::Status order;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("the worker is shutting down");
    if (!assignment_) return absl::FailedPreconditionError("the worker has no layer range assigned yet");
    if (frame.epoch() != assignment_->epoch) return stale(assignment_->epoch);
    // Before anything else: a frame from anyone but this stage's upstream leaves no trace (no step id
    // taken, no rows off the device link, nothing reported).
    if (frame.epoch_secret() != assignment_->request.epoch_secret()) {
      return absl::PermissionDeniedError(absl::StrCat("step ", id, " does not carry epoch ", frame.epoch(),
                                                      "'s secret: only the previous stage (the coordinator for "
                                                      "stage 0) may send steps"));
    }
    order = sequencer_.Check(id);
    a = assignment_;
  }
  // Linked rows are taken off the link at the first sight of their frame, whatever becomes of it.
  auto take_linked = [&a](uint64_t step) { return a->inbox ? a->inbox->Take(step) : nullptr; };
  if (frame.hidden_on_link()) {
    absl::Status st = a->inbox ? a->inbox->Receive(id, SentRows(frame))
                               : absl::FailedPreconditionError(absl::StrCat(
                                     "step ", id, " says its activations are on a device link, but none was opened"));
    if (!st.ok()) {
      return absl::Status(st.code(), absl::StrCat("stage ", a->stage->options().stage, " could not receive step ",
                                                  id, " over its device link: ", st.message()));
    }
  }
  if (!order.ok()) {
    if (order.code() != absl::StatusCode::kAlreadyExists) take_linked(id);  // refused for good: drop its rows
    return order;
  }

  // Checked and decoded outside the lock: frames can be large.
  QueuedStep step;
  step.frame.set_epoch(frame.epoch());
  step.frame.set_step_id(id);
  *step.frame.mutable_slices() = frame.slices();
  *step.frame.mutable_release() = frame.release();
  *step.frame.mutable_drop_prefix() = frame.drop_prefix();
  int64_t rows = 0;
  absl::Status content = CheckFrameContent(frame, a->stage->shape(), &rows);
  if (content.ok() && !a->stage->options().first && frame.hidden_on_link()) {
    step.device_hidden = take_linked(id);
    // Another copy of this frame (a resend racing its original) took the rows and queues the step.
    if (step.device_hidden == nullptr) {
      return absl::AlreadyExistsError(absl::StrCat("step ", id, " was already received"));
    }
  } else if (content.ok() && !a->stage->options().first) {
    auto hidden = DecodeHidden(frame.hidden_dtype(), frame.hidden(), rows, a->stage->shape().hidden_size);
    if (hidden.ok()) {
      step.hidden = std::move(*hidden);
    } else {
      content = hidden.status();
    }
  }
  if (!content.ok()) {
    content = absl::Status(content.code(), absl::StrCat("stage ", a->stage->options().stage, " refused step ", id,
                                                        ": ", content.message()));
    step.refusal = content;
    step.frame.clear_slices();
    step.hidden.clear();
    step.device_hidden.reset();
    if (frame.hidden_on_link()) take_linked(id);
  }

  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("the worker is shutting down");
    if (assignment_ != a) return stale(assignment_->epoch);
    if (auto st = sequencer_.Check(id); !st.ok()) return st;  // a concurrent duplicate won
    sequencer_.Add(id, std::move(step));
    cv_.notify_all();
  }
  return content;
}

bool WorkerService::Drain(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  draining_ = true;
  return cv_.wait_for(lock, absl::ToChronoMilliseconds(timeout),
                      [this] { return stopping_ || (sequences_ == 0 && !busy_ && sequencer_.held() == 0); });
}

WorkerMetrics::Levels WorkerService::MetricsLevels() {
  WorkerMetrics::Levels l;
  std::lock_guard<std::mutex> lock(mu_);
  l.stage = assignment_ ? assignment_->request.stage() : -1;
  l.kv_sliding_bytes = kv_sliding_bytes_used_;
  l.kv_full_bytes = kv_bytes_used_ - kv_sliding_bytes_used_;
  l.kv_capacity_bytes = assignment_ ? assignment_->stage->options().kv_budget_bytes : worker_kv_budget_;
  l.prefix_budget_bytes = assignment_ ? assignment_->stage->options().prefix_cache_bytes : 0;
  l.prefix_bytes = prefix_bytes_;
  l.prefixes = prefixes_;
  l.prefix_evictions = prefix_evictions_;
  l.sequences = sequences_;
  l.queued_steps = static_cast<int64_t>(sequencer_.held());
  l.pending_sends = static_cast<int64_t>(outbox_.pending());
  l.idle_seconds = idle_seconds_;
  if (idle_since_) {
    l.idle_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - *idle_since_).count();
  }
  l.transfer_seconds = outbox_.transfer_ms_total() / 1000.0;
  return l;
}

}  // namespace layerpipe
