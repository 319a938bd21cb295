// The client side of the coordinator's LayerPipe service: one channel per command, and gRPC errors turned
// into the CLI's error form ("CODE: message").
#ifndef LAYERPIPE_CLI_REMOTE_CLIENT_H_
#define LAYERPIPE_CLI_REMOTE_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/args.h"
#include "proto/layerpipe.grpc.pb.h"

namespace layerpipe::cli {

// How to reach a secured coordinator (docs/security.md): --tls, --tls-ca, --tls-cert, --tls-key,
// --tls-server-name, --token, --token-file. --coordinator itself is declared by each command.
std::vector<FlagSpec> ConnectionFlagSpecs();

// The names of ConnectionFlagSpecs(), for refusing them where no coordinator is dialled.
std::vector<std::string> ConnectionFlagNames();

// A stub for the coordinator at --coordinator (HOST:PORT): plaintext unless a TLS flag is given, with
// "authorization: Bearer <token>" on every call when a token is. Receives are unbounded because Score can
// return full logits ([ids, 262144] floats); RPCs fail fast with UNAVAILABLE when nothing listens there.
// Errors: unreadable or invalid files, flags that do not go together.
absl::StatusOr<std::unique_ptr<v1::LayerPipe::Stub>> ConnectCoordinator(const Args& args);

// The gRPC status as an absl::Status of the same code whose message is "CODE_NAME: message", so that Fail()
// prints "layerpipe CMD: CODE_NAME: message".
absl::Status FromGrpc(const grpc::Status& status);

}  // namespace layerpipe::cli

#endif  // LAYERPIPE_CLI_REMOTE_CLIENT_H_
