#include "worker/next_hop.h"

namespace layerpipe {

grpc::Status GrpcNextHop::Send(grpc::ClientContext* ctx, const v1::StepFrame& frame) {
  v1::StepAck ack;
  return stub_->Step(ctx, frame, &ack);
}

}  // namespace layerpipe
