// The hop between two GPU stages: activations go over a device link (NCCL between devices, CUDA IPC
// within one) while the frame's metadata and the next stage's verdict still travel over an inner hop
// (gRPC, or MPI inside layerpipe-mpi).
// The link is set up on the first frame (OpenPeerLink to the next worker, then both join); a next stage
// that declines (a CPU worker) makes this hop send activations in the frame for good.
#ifndef LAYERPIPE_TRANSPORT_PEER_LINK_HOP_H_
#define LAYERPIPE_TRANSPORT_PEER_LINK_HOP_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "engine/backend/layer_backend.h"
#include "transport/next_hop.h"

namespace layerpipe {

struct PeerLinkHopOptions {
  uint64_t epoch = 0;
  int stage = 0;     // the sending stage
  std::string host;  // this worker's host name (with the backend's device_uid: same GPU or not)
};

class PeerLinkHop final : public NextHop {
 public:
  // `backend` runs the sending stage and has device_handoff().
  PeerLinkHop(std::shared_ptr<NextHop> inner, std::shared_ptr<internal::v1::Worker::StubInterface> next_worker,
              std::shared_ptr<LayerBackend> backend, PeerLinkHopOptions options);

  grpc::Status Send(grpc::ClientContext* ctx, const internal::v1::StepFrame& frame) override;
  grpc::Status SendRows(grpc::ClientContext* ctx, internal::v1::StepFrame& frame,
                        const std::shared_ptr<const DeviceRows>& rows) override;
  bool WantsDeviceRows() const override;
  void Cancel() override { inner_->Cancel(); }
  // Aborts the link, so the next stage's pending receive ends too, or gives up joining it.
  void Retire() override;
  std::string transport() const override;

 private:
  enum class State { kUnknown, kLinked, kDeclined };

  // Offers a link to the next stage and joins it; kDeclined when the next stage says no.
  grpc::Status Negotiate(grpc::ClientContext* ctx);

  std::shared_ptr<NextHop> inner_;
  std::shared_ptr<internal::v1::Worker::StubInterface> next_worker_;
  std::shared_ptr<LayerBackend> backend_;
  const PeerLinkHopOptions options_;
  mutable std::mutex mu_;  // state_ (read by WantsDeviceRows from the compute thread)
  State state_ = State::kUnknown;
  // Used by the outbox thread only.
  std::unique_ptr<PeerLink> link_;
  std::atomic<bool> retired_{false};  // set by Retire, read by a join in progress
  uint64_t last_sent_step_ = 0;  // rows go over the link once per step, whatever the retries
};

}  // namespace layerpipe

#endif  // LAYERPIPE_TRANSPORT_PEER_LINK_HOP_H_
