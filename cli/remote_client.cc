#include "cli/remote_client.h"

#include "absl/strings/str_cat.h"

namespace layerpipe::cli {

std::unique_ptr<v1::LayerPipe::Stub> ConnectCoordinator(const std::string& address) {
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(-1);
  return v1::LayerPipe::NewStub(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), channel_args));
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode share the canonical numbering.
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  return absl::Status(code, absl::StrCat(absl::StatusCodeToString(code), ": ", status.error_message()));
}

}  // namespace layerpipe::cli
