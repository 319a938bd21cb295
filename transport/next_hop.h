// How a stage hands its output frame to the next stage. The Outbox owns ordering, retries and blame;
// a NextHop only moves one frame and brings back the next stage's verdict, so every transport keeps the
// same error semantics as the gRPC Step call. A transport that moves the hidden rows some other way
// (e.g. device memory over NCCL) can still wrap a plain hop for the frame's metadata and verdict.
#ifndef LAYERPIPE_TRANSPORT_NEXT_HOP_H_
#define LAYERPIPE_TRANSPORT_NEXT_HOP_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/backend/device_handoff.h"
#include "grpcpp/grpcpp.h"
#include "proto/internal.grpc.pb.h"

namespace layerpipe {

class NextHop {
 public:
  virtual ~NextHop() = default;

  // Delivers `frame` and returns what the next stage answered (its WorkerService::Step status).
  // UNAVAILABLE or DEADLINE_EXCEEDED mean "not delivered, may be tried again"; the outbox retries
  // those. `ctx` carries the attempt's deadline and is TryCancel()ed when the outbox stops.
  virtual grpc::Status Send(grpc::ClientContext* ctx, const internal::v1::StepFrame& frame) = 0;

  // A frame whose activations are still `rows` in device memory (frame.hidden empty). The default
  // copies them into frame.hidden (once: retries find them there) and calls Send; a device transport
  // moves them itself.
  virtual grpc::Status SendRows(grpc::ClientContext* ctx, internal::v1::StepFrame& frame,
                                const std::shared_ptr<const DeviceRows>& rows);
  // Whether the stage should leave its output in device memory for this hop (see SendRows).
  virtual bool WantsDeviceRows() const { return false; }

  // The outbox is stopping: a Send in progress on another thread returns CANCELLED soon, and so
  // does every later one. Only transports that TryCancel() on the context does not reach need it.
  virtual void Cancel() {}

  // The assignment this hop served was replaced (or the worker stops): release what it holds that
  // another process could be waiting on. Called from a control thread.
  virtual void Retire() {}

  // Short name of the transport ("grpc", "mpi"), for WorkerStatus and logs.
  virtual std::string transport() const = 0;
};

// The default hop: the next worker's Step RPC.
class GrpcNextHop final : public NextHop {
 public:
  explicit GrpcNextHop(std::shared_ptr<internal::v1::Worker::StubInterface> stub) : stub_(std::move(stub)) {}
  grpc::Status Send(grpc::ClientContext* ctx, const internal::v1::StepFrame& frame) override;
  std::string transport() const override { return "grpc"; }

 private:
  std::shared_ptr<internal::v1::Worker::StubInterface> stub_;
};

// Chooses the hop of a stage that is not the last, given its assignment. A null result means the
// default gRPC hop to request.next_address(); an error fails the Assign with that status.
using NextHopFactory = std::function<absl::StatusOr<std::shared_ptr<NextHop>>(const internal::v1::AssignRequest& request)>;

}  // namespace layerpipe

#endif  // LAYERPIPE_TRANSPORT_NEXT_HOP_H_
