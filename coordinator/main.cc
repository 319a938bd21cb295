// layerpipe-coordinator: serves the client API and drives the worker pipeline. The flags it shares with
// layerpipe-mpi are in coordinator/coordinator_flags.cc.
// All the work is in RunCoordinator (coordinator/run_coordinator.h), which layerpipe-mpi shares.
// --help lists the flags of both files, --version says which build this is.
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "common/server_flags.h"
#include "coordinator/coordinator_flags.h"
#include "coordinator/run_coordinator.h"

ABSL_FLAG(std::string, listen, "", "address to serve clients on, e.g. 0.0.0.0:50051 or 127.0.0.1:0");
ABSL_FLAG(std::string, advertise, "",
          "address workers report to (StepSink; default: from --peer-listen if given, else --listen)");
ABSL_FLAG(std::string, workers, "", "worker addresses in pipeline order, comma-separated");
ABSL_FLAG(absl::Duration, startup_timeout, absl::Seconds(120), "how long to wait for the workers at start");
// Security (docs/security.md).
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain for the client port (TLS); with --tls-key");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert");
ABSL_FLAG(std::string, tls_client_ca, "", "require client certificates signed by this CA on the client port");
ABSL_FLAG(std::string, peer_listen, "",
          "separate address for StepSink, which workers report to (required with --peer-* and --auth-tokens)");
ABSL_FLAG(std::string, peer_cert, "",
          "PEM certificate the coordinator presents to workers (dialling them, and on --peer-listen)");
ABSL_FLAG(std::string, peer_key, "", "PEM private key of --peer-cert");
ABSL_FLAG(std::string, peer_ca, "", "CA that signs the workers' certificates (mutual TLS with the workers)");
ABSL_FLAG(std::string, auth_tokens, "",
          "file of client tokens, one per line as TOKEN or NAME:TOKEN; every client RPC then needs "
          "\"authorization: Bearer TOKEN\"");
ABSL_FLAG(std::string, admin_clients, "",
          "token names (comma-separated) that see and cancel every client's jobs; others see only their own");
ABSL_FLAG(int, max_concurrent_per_client, 0,
          "RPCs one client (token name, or IP address without tokens) may have open at once; 0: no limit");

int main(int argc, char** argv) {
  layerpipe::ParseServerFlags(std::vector<std::string>(argv, argv + argc), "layerpipe-coordinator",
                              "layerpipe-coordinator --listen ADDR --model DIR --workers A1,A2,...");

  layerpipe::CoordinatorSettings s;
  layerpipe::ReadSharedCoordinatorFlags(&s);
  s.listen = absl::GetFlag(FLAGS_listen);
  s.advertise = absl::GetFlag(FLAGS_advertise);
  s.workers = absl::StrSplit(absl::GetFlag(FLAGS_workers), ',', absl::SkipWhitespace());
  s.startup_timeout = absl::GetFlag(FLAGS_startup_timeout);
  s.security.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  s.security.tls_key = absl::GetFlag(FLAGS_tls_key);
  s.security.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  s.security.peer_cert = absl::GetFlag(FLAGS_peer_cert);
  s.security.peer_key = absl::GetFlag(FLAGS_peer_key);
  s.security.peer_ca = absl::GetFlag(FLAGS_peer_ca);
  s.security.peer_listen = absl::GetFlag(FLAGS_peer_listen);
  s.security.auth_tokens = absl::GetFlag(FLAGS_auth_tokens);
  s.security.max_concurrent_per_client = absl::GetFlag(FLAGS_max_concurrent_per_client);
  s.security.admin_clients = absl::GetFlag(FLAGS_admin_clients);
  return layerpipe::RunCoordinator(s);
}
