// TLS material for the servers and their channels. The PEM files are read and checked when a process
// starts, so that a wrong path, an expired certificate or a key that belongs to another certificate
// stops it with the file's name, instead of surfacing later as an anonymous handshake failure.
#ifndef LAYERPIPE_COMMON_TLS_H_
#define LAYERPIPE_COMMON_TLS_H_

#include <memory>
#include <string>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include "absl/status/statusor.h"

namespace layerpipe {

// Paths of PEM files; an empty path means "not given".
struct TlsFiles {
  std::string cert;  // certificate chain, leaf first
  std::string key;   // the leaf's private key (unencrypted)
  std::string ca;    // CA certificates that sign the other side's certificate
};

// Server side: presents cert + key (both required). With `ca` the server demands a client certificate
// signed by it and refuses the handshake otherwise (mutual TLS); without, clients are not asked for one.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TlsServerCredentials(const TlsFiles& files);

// Client side: verifies the server's certificate against `ca` (empty: the system's roots) and its name
// against the address dialled; presents cert + key when given (both or neither).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> TlsChannelCredentials(const TlsFiles& files);

// Both sides of a mutual-TLS peer (a worker, or the coordinator towards its workers): one certificate,
// served and presented, and one CA, required of everyone who calls and everyone called. All three
// files are required.
struct MutualTls {
  std::shared_ptr<grpc::ServerCredentials> server;
  std::shared_ptr<grpc::ChannelCredentials> channel;
};
absl::StatusOr<MutualTls> LoadMutualTls(const TlsFiles& files);

}  // namespace layerpipe

#endif  // LAYERPIPE_COMMON_TLS_H_
