#include "worker/worker_server.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/host_name.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"

namespace layerpipe {

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(const WorkerOptions& options) {
  // Both are process-wide switches read when a builder is made.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  std::unique_ptr<WorkerServer> s(new WorkerServer());
  s->service_ = std::make_unique<WorkerService>(options);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address,
                           options.server_credentials ? options.server_credentials : grpc::InsecureServerCredentials(),
                           &s->port_);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // gRPC sets SO_REUSEPORT by default: a second worker on the same port would then share it and get
  // some of the first one's frames. Refuse the port instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(s->service_.get());
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    s->service_->Stop();
    s->server_.reset();
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen_address));
  }
  s->address_ = absl::StrCat(HostOf(options.listen_address), ":", s->port_);
  return s;
}

WorkerServer::~WorkerServer() { Shutdown(); }

void WorkerServer::Shutdown() {
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  if (shut_down_ || !server_) return;
  shut_down_ = true;
  if (auto* health = server_->GetHealthCheckService()) health->SetServingStatus(false);
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  service_->Stop();
}

void WorkerServer::Wait() {
  if (server_) server_->Wait();
}

}  // namespace layerpipe
