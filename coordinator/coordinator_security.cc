#include "coordinator/coordinator_security.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/tls.h"

namespace layerpipe {
namespace {

absl::Status Prefixed(const absl::Status& st, const std::string& what) {
  return absl::Status(st.code(), absl::StrCat(what, ": ", st.message()));
}

}  // namespace

absl::StatusOr<CoordinatorSecurity> LoadCoordinatorSecurity(const CoordinatorSecurityFlags& f) {
  if (f.tls_cert.empty() != f.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (!f.tls_client_ca.empty() && f.tls_cert.empty()) {
    return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
  }
  const int peer_files = !f.peer_cert.empty() + !f.peer_key.empty() + !f.peer_ca.empty();
  if (peer_files != 0 && peer_files != 3) {
    return absl::InvalidArgumentError("--peer-cert, --peer-key and --peer-ca go together");
  }
  if (peer_files == 3 && f.peer_listen.empty()) {
    return absl::InvalidArgumentError(
        "mutual TLS with the workers needs --peer-listen: StepSink gets a port of its own that requires "
        "worker certificates");
  }
  if (!f.auth_tokens.empty() && f.peer_listen.empty()) {
    return absl::InvalidArgumentError(
        "--auth-tokens needs --peer-listen: StepSink must not share the client port, where it would be "
        "open to anyone who can reach it");
  }
  if (!f.admin_clients.empty() && f.auth_tokens.empty()) {
    return absl::InvalidArgumentError("--admin-clients names tokens: it needs --auth-tokens");
  }
  if (f.max_concurrent_per_client < 0) {
    return absl::InvalidArgumentError("--max-concurrent-per-client must be >= 0");
  }

  CoordinatorSecurity s;
  if (f.tls_cert.empty()) {
    s.api = grpc::InsecureServerCredentials();
  } else {
    auto api = TlsServerCredentials({f.tls_cert, f.tls_key, f.tls_client_ca});
    if (!api.ok()) return Prefixed(api.status(), "client port TLS");
    s.api = *std::move(api);
  }
  if (peer_files == 3) {
    auto peer = LoadMutualTls({f.peer_cert, f.peer_key, f.peer_ca});
    if (!peer.ok()) return Prefixed(peer.status(), "worker mutual TLS");
    s.peer = peer->server;
    s.workers = peer->channel;
  } else {
    if (!f.peer_listen.empty()) s.peer = grpc::InsecureServerCredentials();
    s.workers = grpc::InsecureChannelCredentials();
  }

  ClientGate::Options gate;
  gate.max_concurrent_per_client = f.max_concurrent_per_client;
  if (!f.auth_tokens.empty()) {
    auto tokens = AuthTokens::Load(f.auth_tokens);
    if (!tokens.ok()) return Prefixed(tokens.status(), "--auth-tokens");
    gate.tokens = *std::move(tokens);
    if (f.tls_cert.empty()) {
      s.warnings.push_back("--auth-tokens without --tls-cert: tokens cross the network in plaintext");
    }
  }
  for (absl::string_view name : absl::StrSplit(f.admin_clients, ',', absl::SkipWhitespace())) {
    gate.admins.insert(std::string(absl::StripAsciiWhitespace(name)));
  }
  if (gate.tokens || gate.max_concurrent_per_client > 0) s.gate = std::make_shared<ClientGate>(std::move(gate));
  if (!f.tls_cert.empty() && peer_files == 0) {
    s.warnings.push_back("the client port has TLS but the workers do not (--peer-cert/--peer-key/--peer-ca)");
  }
  return s;
}

}  // namespace layerpipe
