// A worker's gRPC server, startable in-process (tests, a local cluster) as well as from main().
#ifndef LAYERPIPE_WORKER_WORKER_SERVER_H_
#define LAYERPIPE_WORKER_WORKER_SERVER_H_

#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "worker/worker_service.h"

namespace layerpipe {

class WorkerServer {
 public:
  // Listens on options.listen_address (port 0 picks a free port) with the Worker service, the
  // standard health service and reflection. Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(const WorkerOptions& options);
  ~WorkerServer();  // Shutdown()

  // HOST:PORT as listened on, with the port actually bound (e.g. "127.0.0.1:40123").
  const std::string& address() const { return address_; }
  int port() const { return port_; }

  // What /metrics serves.
  MetricsRegistry& metrics() { return service_->metrics(); }

  // The service itself, for frames that reach this worker by another transport than gRPC.
  WorkerService& service() { return *service_; }

  // See WorkerService::Drain.
  bool Drain(absl::Duration timeout) { return service_->Drain(timeout); }

  // Stops taking RPCs (those in progress get a moment to finish), then the compute and send threads.
  // Idempotent; safe from any thread.
  void Shutdown();
  // Blocks until Shutdown() has been called and the server has stopped.
  void Wait();

 private:
  WorkerServer() = default;

  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  int port_ = 0;
  std::mutex shutdown_mu_;
  bool shut_down_ = false;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_WORKER_WORKER_SERVER_H_
