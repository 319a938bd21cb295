// layerpipe-coordinator: serves the client API and drives the worker pipeline.
// All the work is in RunCoordinator (coordinator/run_coordinator.h), which layerpipe-mpi shares.
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "common/dash_flags.h"
#include "coordinator/run_coordinator.h"

ABSL_FLAG(std::string, listen, "", "address to serve clients on, e.g. 0.0.0.0:50051 or 127.0.0.1:0");
ABSL_FLAG(std::string, advertise, "",
          "address workers report to (StepSink; default: from --peer-listen if given, else --listen)");
ABSL_FLAG(std::string, model, "", "checkpoint directory (config.json, tokenizer.json); workers map the weights");
ABSL_FLAG(std::string, workers, "", "worker addresses in pipeline order, comma-separated");
ABSL_FLAG(std::string, layer_split, "", "explicit ranges like 0-4,5-5,6-11 (default: balanced by cost)");
ABSL_FLAG(std::string, precision, "bf16", "bf16 or fp32");
ABSL_FLAG(int64_t, prefill_chunk, 256, "prompt tokens per step for one sequence");
ABSL_FLAG(int, max_batch, 64, "decode sequences per step");
ABSL_FLAG(absl::Duration, recovery_deadline, absl::Seconds(30),
          "how long in-flight requests wait for a lost worker to come back before failing with UNAVAILABLE");
ABSL_FLAG(absl::Duration, step_timeout, absl::Seconds(120), "a step not back by then means a hung worker");
ABSL_FLAG(absl::Duration, health_interval, absl::Seconds(1), "how often workers are probed");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(60),
          "on SIGTERM, how long admitted requests may take to finish (new ones are refused)");
ABSL_FLAG(absl::Duration, startup_timeout, absl::Seconds(120), "how long to wait for the workers at start");
ABSL_FLAG(std::string, metrics_listen, "",
          "serve Prometheus metrics at http://HOST:PORT/metrics (port 0: any free port)");
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
ABSL_FLAG(int, max_concurrent_per_client, 0,
          "RPCs one client (token name, or IP address without tokens) may have open at once; 0: no limit");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("layerpipe-coordinator --listen ADDR --model DIR --workers A1,A2,...");
  std::vector<std::string> args = layerpipe::DashesToUnderscores(argc, argv);
  std::vector<char*> arg_ptrs = layerpipe::ArgPointers(args);
  absl::ParseCommandLine(static_cast<int>(arg_ptrs.size()), arg_ptrs.data());

  layerpipe::CoordinatorSettings s;
  s.listen = absl::GetFlag(FLAGS_listen);
  s.advertise = absl::GetFlag(FLAGS_advertise);
  s.model = absl::GetFlag(FLAGS_model);
  s.workers = absl::StrSplit(absl::GetFlag(FLAGS_workers), ',', absl::SkipWhitespace());
  s.layer_split = absl::GetFlag(FLAGS_layer_split);
  s.precision = absl::GetFlag(FLAGS_precision);
  s.prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  s.max_batch = absl::GetFlag(FLAGS_max_batch);
  s.recovery_deadline = absl::GetFlag(FLAGS_recovery_deadline);
  s.step_timeout = absl::GetFlag(FLAGS_step_timeout);
  s.health_interval = absl::GetFlag(FLAGS_health_interval);
  s.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  s.startup_timeout = absl::GetFlag(FLAGS_startup_timeout);
  s.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  s.security.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  s.security.tls_key = absl::GetFlag(FLAGS_tls_key);
  s.security.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  s.security.peer_cert = absl::GetFlag(FLAGS_peer_cert);
  s.security.peer_key = absl::GetFlag(FLAGS_peer_key);
  s.security.peer_ca = absl::GetFlag(FLAGS_peer_ca);
  s.security.peer_listen = absl::GetFlag(FLAGS_peer_listen);
  s.security.auth_tokens = absl::GetFlag(FLAGS_auth_tokens);
  s.security.max_concurrent_per_client = absl::GetFlag(FLAGS_max_concurrent_per_client);
  return layerpipe::RunCoordinator(s);
}
