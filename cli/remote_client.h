// The client side of the coordinator's LayerPipe service: one channel per command, and gRPC errors turned
// into the CLI's error form ("CODE: message").
#ifndef LAYERPIPE_CLI_REMOTE_CLIENT_H_
#define LAYERPIPE_CLI_REMOTE_CLIENT_H_

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "proto/layerpipe.grpc.pb.h"

namespace layerpipe::cli {

// A stub for the coordinator at `address` (HOST:PORT). Receives are unbounded because Score can return
// full logits ([ids, 262144] floats); RPCs fail fast with UNAVAILABLE when nothing listens there.
std::unique_ptr<v1::LayerPipe::Stub> ConnectCoordinator(const std::string& address);

// The gRPC status as an absl::Status of the same code whose message is "CODE_NAME: message", so that Fail()
// prints "layerpipe CMD: CODE_NAME: message".
absl::Status FromGrpc(const grpc::Status& status);

}  // namespace layerpipe::cli

#endif  // LAYERPIPE_CLI_REMOTE_CLIENT_H_
