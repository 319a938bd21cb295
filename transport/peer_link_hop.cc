#include "transport/peer_link_hop.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace layerpipe {

PeerLinkHop::PeerLinkHop(std::shared_ptr<NextHop> inner, std::shared_ptr<internal::v1::Worker::StubInterface> next_worker,
                         std::shared_ptr<LayerBackend> backend, PeerLinkHopOptions options)
    : inner_(std::move(inner)), next_worker_(std::move(next_worker)), backend_(backend), options_(std::move(options)) {}

bool PeerLinkHop::WantsDeviceRows() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_ != State::kDeclined;
}

std::string PeerLinkHop::transport() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_ == State::kLinked && link_ ? link_->transport() : inner_->transport();
}

void PeerLinkHop::Retire() {
  retired_.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> lock(mu_);
  if (link_) link_->Abort();
}

grpc::Status PeerLinkHop::Send(grpc::ClientContext* ctx, const internal::v1::StepFrame& frame) {
  // Frames without device rows (a failed step's empty hand-off, or after a decline) carry what they carry.
  return inner_->Send(ctx, frame);
}

grpc::Status PeerLinkHop::Negotiate(grpc::ClientContext* ctx) {
  auto id = backend_->NewPeerLinkId();
  if (!id.ok()) {
    LP_LOG(WARNING) << "stage " << options_.stage << " sends activations over " << inner_->transport() << ": "
                    << id.status().message();
    std::lock_guard<std::mutex> lock(mu_);
    state_ = State::kDeclined;
    return grpc::Status::OK;
  }
  internal::v1::PeerLinkRequest request;
  request.set_epoch(options_.epoch);
  request.set_from_stage(options_.stage);
  request.set_link_id(*id);
  request.set_host(options_.host);
  request.set_device_uid(backend_->device_uid());
  internal::v1::PeerLinkReply reply;
  // A context serves one call; the frame itself still goes out with `ctx`.
  grpc::ClientContext offer_ctx;
  offer_ctx.set_deadline(ctx->deadline());
  const grpc::Status st = next_worker_->OpenPeerLink(&offer_ctx, request, &reply);
  if (st.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    reply.set_accepted(false);
    reply.set_reason("the next worker does not offer device links");
  } else if (!st.ok()) {
    return st;  // the outbox retries transient failures like any send
  }
  if (!reply.accepted()) {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = State::kDeclined;
    LP_LOG(INFO) << "stage " << options_.stage << " sends activations over " << inner_->transport() << ": "
                 << reply.reason();
    return grpc::Status::OK;
  }
  // The next stage joins in the background; this returns once both ends are in.
  const PeerLinkKind kind = reply.same_device() ? PeerLinkKind::kSameDevice : PeerLinkKind::kAcrossDevices;
  auto link = backend_->JoinPeerLink(*id, /*rank=*/0, kind, &retired_);
  if (!link.ok()) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        absl::StrCat("stage ", options_.stage, " could not join its device link to stage ",
                                     options_.stage + 1, ": ", link.status().message()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  link_ = std::move(*link);
  state_ = State::kLinked;
  LP_LOG(INFO) << "stage " << options_.stage << " sends activations to stage " << options_.stage + 1 << " over "
               << link_->transport();
  return grpc::Status::OK;
}

grpc::Status PeerLinkHop::SendRows(grpc::ClientContext* ctx, internal::v1::StepFrame& frame,
                                   const std::shared_ptr<const DeviceRows>& rows) {
  State state;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state = state_;
  }
  if (state == State::kUnknown) {
    if (grpc::Status st = Negotiate(ctx); !st.ok()) return st;
    std::lock_guard<std::mutex> lock(mu_);
    state = state_;
  }
  if (state == State::kDeclined) return NextHop::SendRows(ctx, frame, rows);

  // The rows are queued on the link before the metadata goes out: the next stage posts its receive
  // when the frame arrives, so the reverse order could leave both ends waiting for each other.
  if (frame.step_id() != last_sent_step_) {
    if (absl::Status st = link_->Send(rows); !st.ok()) {
      return grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat("device link to stage ", options_.stage + 1,
                                                                   ": ", st.message()));
    }
    last_sent_step_ = frame.step_id();
  }
  frame.clear_hidden();
  frame.set_hidden_dtype(internal::v1::HIDDEN_F32);
  frame.set_hidden_on_link(true);
  return inner_->Send(ctx, frame);
}

}  // namespace layerpipe
