#include "worker/worker_service.h"

#include <chrono>
#include <exception>
#include <new>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/host_name.h"
#include "engine/model/config.h"
#include "engine/cpu/cpu_backend.h"
#include "worker/byte_size.h"
#include "worker/frame_check.h"
#include "transport/hidden_codec.h"
#include "transport/peer_link_hop.h"

namespace layerpipe {
namespace {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                          const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  return grpc::CreateCustomChannel(address, credentials ? credentials : grpc::InsecureChannelCredentials(), args);
}

WeightSelection SelectionOf(const v1::AssignRequest& r) {
  return WeightSelection{r.layer_begin(), r.layer_end(), /*embedding=*/r.first(), /*head=*/r.last()};
}

bool SameWeights(const v1::AssignRequest& a, const v1::AssignRequest& b) {
  return a.model_dir() == b.model_dir() && a.layer_begin() == b.layer_begin() && a.layer_end() == b.layer_end() &&
         a.first() == b.first() && a.last() == b.last();
}

int64_t WeightBytes(const ModelWeights& w) {
  int64_t bytes = 0;
  for (int l = w.selection().layer_begin; l < w.selection().layer_end; ++l) bytes += w.LayerMatrixBytes(l);
  if (w.selection().embedding || w.selection().head) bytes += w.embed_tokens().bytes();
  return bytes;
}

// Everything about an AssignRequest that can be refused without reading weights.
absl::Status CheckAssign(const v1::AssignRequest& r, const ModelConfig& config) {
  const int layers = config.num_layers;
  if (r.layer_begin() < 0 || r.layer_end() > layers || r.layer_begin() >= r.layer_end()) {
    return absl::InvalidArgumentError(absl::StrCat("layer range [", r.layer_begin(), ", ", r.layer_end(),
                                                   ") is not a non-empty range within the model's ", layers,
                                                   " layers"));
  }
  if (r.first() != (r.layer_begin() == 0)) {
    return absl::InvalidArgumentError(absl::StrCat("the first stage must start at layer 0 and only it may; got first=",
                                                   r.first(), " with layer_begin ", r.layer_begin()));
  }
  if (r.last() != (r.layer_end() == layers)) {
    return absl::InvalidArgumentError(absl::StrCat("the last stage must end at layer ", layers,
                                                   " and only it may; got last=", r.last(), " with layer_end ",
                                                   r.layer_end()));
  }
  if (!r.last() && r.next_address().empty()) {
    return absl::InvalidArgumentError("next_address is required for every stage but the last");
  }
  if (r.coordinator_address().empty()) {
    return absl::InvalidArgumentError("coordinator_address is required (results and step errors go there)");
  }
  if (r.kv_budget_bytes() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("kv_budget_bytes ", r.kv_budget_bytes(), " is negative"));
  }
  if (r.stage() < 0) return absl::InvalidArgumentError(absl::StrCat("stage ", r.stage(), " is negative"));
  return absl::OkStatus();
}

// Rows (tokens) of a frame as sent, whatever its content: a linked frame's rows arrive even when the
// frame is then refused, and must be taken off the link all the same.
int64_t SentRows(const v1::StepFrame& frame) {
  int64_t rows = 0;
  for (const v1::StepSlice& s : frame.slices()) rows += s.ids_size();
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

void WorkerService::RetireLinks(Assignment& a) {
  std::shared_ptr<PeerLink> inbound;
  {
    std::lock_guard<std::mutex> lock(a.retire_mu);
    a.retired.store(true, std::memory_order_release);
    inbound = a.joined;
  }
  if (!inbound) {
    if (a.next) a.next->Retire();
    return;
  }
  // Both directions at once: aborting one link may wait on the device until the other's transfer,
  // stuck on a dead peer, is aborted too.
  std::thread outbound([&a] {
    if (a.next) a.next->Retire();
  });
  inbound->Abort();
  outbound.join();
}

void WorkerService::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (assignment_) RetireLinks(*assignment_);
    cv_.notify_all();
  }
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (compute_.joinable()) compute_.join();
  }
  outbox_.Stop();
}

// ------------------------------------------------------------------------------------------ control

absl::StatusOr<std::shared_ptr<const ModelWeights>> WorkerService::WeightsFor(const v1::AssignRequest& request,
                                                                              const ModelConfig& config) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (assignment_ && SameWeights(assignment_->request, request)) return assignment_->weights;
  }
  auto loaded = ModelWeights::Load(request.model_dir(), config, SelectionOf(request));
  if (!loaded.ok()) return loaded.status();
  return std::shared_ptr<const ModelWeights>(std::move(*loaded));
}

absl::Status WorkerService::DoAssign(const v1::AssignRequest& in, v1::AssignResponse* response) {
  v1::AssignRequest request = in;
  if (request.model_dir().empty()) request.set_model_dir(options_.default_model_dir);
  if (request.model_dir().empty()) {
    return absl::InvalidArgumentError("model_dir is empty and the worker was started without --model");
  }
  if (request.precision().empty()) request.set_precision("bf16");
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

  auto a = std::make_shared<Assignment>();
  a->epoch = request.epoch();
  a->request = request;
  a->weights = *weights;
  StageOptions so;
  so.stage = request.stage();
  so.first = request.first();
  so.last = request.last();
  so.precision = precision;
  // The coordinator may ask for less than the worker's own limit, never more.
  so.kv_budget_bytes = request.kv_budget_bytes() > 0 ? std::min(request.kv_budget_bytes(), worker_kv_budget_)
                                                     : worker_kv_budget_;
  std::unique_ptr<LayerBackend> backend;
  if (options_.make_backend) {
    auto made = options_.make_backend(*a->weights, precision, pool_);
    if (!made.ok()) return made.status();
    backend = std::move(*made);
  } else {
    backend = std::make_unique<CpuBackend>(*a->weights, precision, pool_);
  }
  a->stage = std::make_unique<Stage>(a->weights, so, std::move(backend));
  if (!request.last()) {
    if (options_.next_hop) {
      auto hop = options_.next_hop(request);
      if (!hop.ok()) return hop.status();
      a->next = std::move(*hop);
    }
    std::shared_ptr<v1::Worker::StubInterface> next_worker =
        v1::Worker::NewStub(MakeChannel(request.next_address(), options_.channel_credentials));
    if (!a->next) a->next = std::make_shared<GrpcNextHop>(next_worker);
    // A GPU stage offers the next one a device link for the activations; the inner hop keeps carrying
    // the frames' metadata.
    if (a->stage->backend()->device_handoff()) {
      a->next = std::make_shared<PeerLinkHop>(a->next, next_worker, a->stage->backend(),
                                              PeerLinkHopOptions{request.epoch(), request.stage(), host_name_});
    }
  }
  a->sink = v1::StepSink::NewStub(MakeChannel(request.coordinator_address(), options_.channel_credentials));

  std::shared_ptr<Assignment> old;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("the worker is shutting down");
    // The running step (of the old epoch) finishes first; no new one starts meanwhile. It may be
    // waiting for linked rows from a previous stage that is gone: the links go first.
    if (assignment_) RetireLinks(*assignment_);
    assigning_ = true;
    cv_.wait(lock, [this] { return !busy_; });
    old = std::move(assignment_);
    assignment_ = a;
    sequencer_.Reset();
    kv_bytes_used_ = 0;
    kv_sliding_bytes_used_ = 0;
    sequences_ = 0;
    if (!idle_since_) idle_since_ = std::chrono::steady_clock::now();  // the compute thread is idle now
    outbox_.SetEpoch(a->epoch);
    assigning_ = false;
    cv_.notify_all();
  }
  response->set_kv_capacity_bytes(so.kv_budget_bytes);
  response->set_weight_bytes(WeightBytes(*a->weights));
  return absl::OkStatus();
}

grpc::Status WorkerService::Assign(grpc::ServerContext*, const v1::AssignRequest* request,
                                   v1::AssignResponse* response) {
  std::lock_guard<std::mutex> lock(assign_mu_);
  return ToGrpc(DoAssign(*request, response));
}

grpc::Status WorkerService::Status(grpc::ServerContext*, const v1::WorkerStatusRequest*, v1::WorkerStatus* response) {
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
  response->set_sequences(sequences_);
  response->set_draining(draining_);
  response->set_compute_ms_total(compute_ms_total_);
  response->set_transfer_ms_total(outbox_.transfer_ms_total());
  response->set_steps(steps_);
  return grpc::Status::OK;
}

// --------------------------------------------------------------------------------------------- data

grpc::Status WorkerService::Step(grpc::ServerContext*, const v1::StepFrame* request, v1::StepAck*) {
  return ToGrpc(TakeFrame(*request));
}

grpc::Status WorkerService::OpenPeerLink(grpc::ServerContext*, const v1::PeerLinkRequest* request,
                                         v1::PeerLinkReply* response) {
  auto reply = DoOpenPeerLink(*request);
  if (!reply.ok()) return ToGrpc(reply.status());
  *response = std::move(*reply);
  return grpc::Status::OK;
}

absl::StatusOr<v1::PeerLinkReply> WorkerService::DoOpenPeerLink(const v1::PeerLinkRequest& request) {
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
  v1::PeerLinkReply reply;
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
  std::lock_guard<std::mutex> lock(a->link_mu);
  if (a->inbound.has_value()) {
    return absl::AlreadyExistsError(absl::StrCat("stage ", stage, " already has a link for epoch ", a->epoch));
  }
  a->inbound_sender = sender;
  // Joining waits for the sender, who joins once it has this reply: in the background. The thread
  // holds the assignment so the backend stays alive however long the join takes.
  auto joined = std::make_shared<std::promise<absl::StatusOr<std::shared_ptr<PeerLink>>>>();
  a->inbound = joined->get_future().share();
  std::thread([a, joined, kind, id = request.link_id(), failed_links = failed_links_, sender] {
    auto link = a->stage->backend()->JoinPeerLink(id, /*rank=*/1, kind, &a->retired);
    if (!link.ok() && !a->retired.load(std::memory_order_acquire)) failed_links->Note(sender, link.status());
    if (link.ok()) {
      std::shared_ptr<PeerLink> shared(std::move(*link));
      {
        std::lock_guard<std::mutex> retire_lock(a->retire_mu);
        if (a->retired.load(std::memory_order_acquire)) shared->Abort();
        a->joined = shared;
      }
      joined->set_value(std::move(shared));
    } else {
      joined->set_value(link.status());
    }
  }).detach();
  reply.set_accepted(true);
  reply.set_same_device(kind == PeerLinkKind::kSameDevice);
  return reply;
}

absl::Status WorkerService::ReceiveLinked(Assignment& a, const v1::StepFrame& frame) {
  const uint64_t id = frame.step_id();
  std::lock_guard<std::mutex> lock(a.link_mu);
  if (id <= a.last_linked_step) return absl::OkStatus();  // a resend: its rows came with the first copy
  if (!a.inbound.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("step ", id, " says its activations are on a device link, but none was opened"));
  }
  const absl::StatusOr<std::shared_ptr<PeerLink>>& link = a.inbound->get();  // waits for the join
  if (!link.ok()) return link.status();
  auto rows = (*link)->Receive(SentRows(frame), a.stage->shape().hidden_size);
  if (!rows.ok()) {
    // A link that never carried a step is not tried again with this sender; one that did, failed
    // for a reason of its own (the sender went away) and is.
    if (!a.received_on_link && !a.retired.load(std::memory_order_acquire)) {
      failed_links_->Note(a.inbound_sender, rows.status());
    }
    return rows.status();
  }
  a.received_on_link = true;
  a.last_linked_step = id;
  a.linked_rows[id] = std::move(*rows);
  return absl::OkStatus();
}

std::unique_ptr<DeviceRows> WorkerService::TakeLinked(Assignment& a, uint64_t step_id) {
  std::lock_guard<std::mutex> lock(a.link_mu);
  auto it = a.linked_rows.find(step_id);
  if (it == a.linked_rows.end()) return nullptr;
  std::unique_ptr<DeviceRows> rows = std::move(it->second);
  a.linked_rows.erase(it);
  return rows;
}

absl::Status WorkerService::TakeFrame(const v1::StepFrame& frame) {
  const absl::Status st = AcceptStep(frame);
  if (!st.ok()) metrics_.OnRejected(st.code());
  return st;
}

absl::Status WorkerService::AcceptStep(const v1::StepFrame& frame) {
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
    order = sequencer_.Check(id);
    a = assignment_;
  }
  if (frame.hidden_on_link()) {
    if (auto st = ReceiveLinked(*a, frame); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("stage ", a->stage->options().stage, " could not receive step ",
                                                  id, " over its device link: ", st.message()));
    }
  }
  if (!order.ok()) {
    if (order.code() != absl::StatusCode::kAlreadyExists) TakeLinked(*a, id);  // refused for good: drop its rows
    return order;
  }

  // Checked and decoded outside the lock: frames can be large.
  QueuedStep step;
  step.frame.set_epoch(frame.epoch());
  step.frame.set_step_id(id);
  *step.frame.mutable_slices() = frame.slices();
  *step.frame.mutable_release() = frame.release();
  int64_t rows = 0;
  absl::Status content = CheckFrameContent(frame, a->stage->shape(), &rows);
  if (content.ok() && !a->stage->options().first && frame.hidden_on_link()) {
    step.device_hidden = TakeLinked(*a, id);
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
    if (frame.hidden_on_link()) TakeLinked(*a, id);
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

void WorkerService::ComputeLoop() {
  for (;;) {
    std::shared_ptr<Assignment> a;
    QueuedStep step;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || (!assigning_ && assignment_ && sequencer_.Ready()); });
      if (stopping_) return;
      step = sequencer_.Pop();
      a = assignment_;
      busy_ = true;
      if (idle_since_) {
        idle_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - *idle_since_).count();
        idle_since_.reset();
      }
    }
    RunStep(*a, std::move(step));
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
    idle_since_ = std::chrono::steady_clock::now();
    cv_.notify_all();
  }
}

void WorkerService::RecordStep(const Assignment& a, std::chrono::steady_clock::time_point start) {
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(mu_);
  compute_ms_total_ += ms;
  ++steps_;
  kv_bytes_used_ = a.stage->kv_bytes_used();
  kv_sliding_bytes_used_ = a.stage->kv_sliding_bytes_used();
  sequences_ = a.stage->sequences();
  metrics_.OnStep(ms / 1000.0);
}

WorkerMetrics::Levels WorkerService::MetricsLevels() {
  WorkerMetrics::Levels l;
  std::lock_guard<std::mutex> lock(mu_);
  l.stage = assignment_ ? assignment_->request.stage() : -1;
  l.kv_sliding_bytes = kv_sliding_bytes_used_;
  l.kv_full_bytes = kv_bytes_used_ - kv_sliding_bytes_used_;
  l.kv_capacity_bytes = assignment_ ? assignment_->stage->options().kv_budget_bytes : worker_kv_budget_;
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

void WorkerService::RunStep(Assignment& a, QueuedStep step) {
  const auto start = std::chrono::steady_clock::now();
  Stage& stage = *a.stage;
  const StageOptions& so = stage.options();
  const v1::StepFrame& frame = step.frame;
  v1::StepFrame forward;
  v1::StepResult result;
  std::shared_ptr<const DeviceRows> device_rows;  // the output, when the next hop takes device rows
  absl::Status st = step.refusal;
  const bool refused = !st.ok();
  if (!refused) {
    // A step must never take the worker down: an allocation that fails ends this step only.
    try {
      StageInput input{std::move(step.hidden), std::move(step.device_hidden)};
      st = stage.Run(frame, std::move(input), &forward, &result,
                     !so.last && a.next->WantsDeviceRows() ? &device_rows : nullptr);
    } catch (const std::bad_alloc&) {
      st = absl::ResourceExhaustedError("out of memory while running the step");
    } catch (const std::exception& e) {
      st = absl::InternalError(absl::StrCat("the step failed: ", e.what()));
    }
  }
  stage.Release(frame.release());
  // Counted before anything is sent: whoever sees this step's result also sees it in Status.
  RecordStep(a, start);

  if (!st.ok()) {
    v1::StepResult failure;
    failure.set_epoch(frame.epoch());
    failure.set_step_id(frame.step_id());
    failure.set_stage(so.stage);
    failure.set_error_code(static_cast<int>(st.code()));
    failure.set_error(refused ? std::string(st.message())
                              : absl::StrCat("stage ", so.stage, ", step ", frame.step_id(), ": ", st.message()));
    outbox_.Report(a.sink, std::move(failure));
  }
  if (!so.last) {
    if (!st.ok()) {
      // The step goes on without its slices, so the later stages keep their order and free the
      // released sequences too.
      forward.Clear();
      forward.set_epoch(frame.epoch());
      forward.set_step_id(frame.step_id());
      *forward.mutable_release() = frame.release();
      forward.set_hidden_dtype(stage.wire_dtype());
      device_rows.reset();
    }
    outbox_.Forward(a.next, a.sink, so.stage, std::move(forward), std::move(device_rows));
  } else if (st.ok()) {
    outbox_.Report(a.sink, std::move(result));
  }
}

}  // namespace layerpipe
