// The coordinator's security flags turned into what its servers and channels use. Without any of them
// everything stays plaintext and open, as before.
//
// Two ports, because one gRPC port cannot demand client certificates for one service only:
// - the client port (--listen) serves LayerPipe: TLS with --tls-cert/--tls-key, client certificates
//   only with --tls-client-ca, bearer tokens with --auth-tokens;
// - the peer port (--peer-listen) serves StepSink, which the workers report to: mutual TLS with
//   --peer-cert/--peer-key/--peer-ca, the same certificate the coordinator presents to the workers it
//   dials. Without --peer-listen, StepSink stays on the client port (plaintext deployments).
#ifndef LAYERPIPE_COORDINATOR_COORDINATOR_SECURITY_H_
#define LAYERPIPE_COORDINATOR_COORDINATOR_SECURITY_H_

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include "absl/status/statusor.h"
#include "coordinator/client_gate.h"

namespace layerpipe {

struct CoordinatorSecurityFlags {
  std::string tls_cert, tls_key, tls_client_ca;  // the client port
  std::string peer_cert, peer_key, peer_ca;      // towards the workers
  std::string peer_listen;
  std::string auth_tokens;
  int max_concurrent_per_client = 0;
  std::string admin_clients;  // comma-separated token names that see every client's jobs
};

struct CoordinatorSecurity {
  std::shared_ptr<grpc::ServerCredentials> api;        // the client port
  std::shared_ptr<grpc::ServerCredentials> peer;       // the peer port; set only with --peer-listen
  std::shared_ptr<grpc::ChannelCredentials> workers;   // channels to the workers
  std::shared_ptr<ClientGate> gate;                    // null: every client is let in
  std::vector<std::string> warnings;                   // for stderr: allowed, but probably not meant
};

// Reads and checks every file named; INVALID_ARGUMENT for flags that do not go together.
absl::StatusOr<CoordinatorSecurity> LoadCoordinatorSecurity(const CoordinatorSecurityFlags& flags);

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_COORDINATOR_SECURITY_H_
