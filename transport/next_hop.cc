#include "transport/next_hop.h"

#include <vector>

#include "transport/hidden_codec.h"

namespace layerpipe {

grpc::Status NextHop::SendRows(grpc::ClientContext* ctx, internal::v1::StepFrame& frame,
                               const std::shared_ptr<const DeviceRows>& rows) {
  if (frame.hidden().empty() && rows != nullptr && rows->rows() > 0) {
    std::vector<float> host(static_cast<size_t>(rows->rows() * rows->width()));
    if (absl::Status st = rows->CopyToHost(host.data()); !st.ok()) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "could not copy the step's activations off the device: " +
                                                          std::string(st.message()));
    }
    frame.set_hidden_dtype(internal::v1::HIDDEN_F32);
    EncodeHidden(host.data(), rows->rows(), rows->width(), internal::v1::HIDDEN_F32, frame.mutable_hidden());
  }
  return Send(ctx, frame);
}

grpc::Status GrpcNextHop::Send(grpc::ClientContext* ctx, const internal::v1::StepFrame& frame) {
  internal::v1::StepAck ack;
  return stub_->Step(ctx, frame, &ack);
}

}  // namespace layerpipe
