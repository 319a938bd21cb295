// layerpipe-coordinator: serves the client API and drives the worker pipeline.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/dash_flags.h"
#include "common/metrics_http.h"
#include "coordinator/api_service.h"
#include "coordinator/coordinator_security.h"
#include "coordinator/pipeline.h"
#include "coordinator/planner.h"
#include "engine/stop_conditions.h"
#include "engine/tokenizer.h"

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

namespace {

// A server on `listen` for `services`; *port is the port bound (0 when it could not listen). Messages
// up to 512 MiB: full logits of a scored prompt can be large.
std::unique_ptr<grpc::Server> StartServer(const std::string& listen,
                                          const std::shared_ptr<grpc::ServerCredentials>& credentials,
                                          const std::vector<grpc::Service*>& services, int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, credentials, port);
  builder.SetMaxReceiveMessageSize(512 << 20);
  builder.SetMaxSendMessageSize(512 << 20);
  for (grpc::Service* s : services) builder.RegisterService(s);
  return builder.BuildAndStart();
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "layerpipe-coordinator: %s\n", msg.c_str());
  return 1;
}

layerpipe::CoordinatorSecurityFlags SecurityFlags() {
  layerpipe::CoordinatorSecurityFlags f;
  f.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  f.tls_key = absl::GetFlag(FLAGS_tls_key);
  f.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  f.peer_cert = absl::GetFlag(FLAGS_peer_cert);
  f.peer_key = absl::GetFlag(FLAGS_peer_key);
  f.peer_ca = absl::GetFlag(FLAGS_peer_ca);
  f.peer_listen = absl::GetFlag(FLAGS_peer_listen);
  f.auth_tokens = absl::GetFlag(FLAGS_auth_tokens);
  f.max_concurrent_per_client = absl::GetFlag(FLAGS_max_concurrent_per_client);
  return f;
}

// The host part of a listen address, as something others can dial.
std::string ReachableHost(const std::string& listen) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host == "0.0.0.0" || host == "[::]" || host.empty()) host = "127.0.0.1";
  return host;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace layerpipe;
  absl::SetProgramUsageMessage("layerpipe-coordinator --listen ADDR --model DIR --workers A1,A2,...");
  std::vector<std::string> args = DashesToUnderscores(argc, argv);
  std::vector<char*> arg_ptrs = ArgPointers(args);
  absl::ParseCommandLine(static_cast<int>(arg_ptrs.size()), arg_ptrs.data());
  const std::string listen = absl::GetFlag(FLAGS_listen), model = absl::GetFlag(FLAGS_model);
  if (listen.empty() || model.empty() || absl::GetFlag(FLAGS_workers).empty()) {
    std::fprintf(stderr, "layerpipe-coordinator: --listen, --model and --workers are required\n");
    return 2;
  }
  const std::string precision = absl::GetFlag(FLAGS_precision);
  if (precision != "bf16" && precision != "fp32") {
    std::fprintf(stderr, "layerpipe-coordinator: --precision must be bf16 or fp32\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_prefill_chunk) <= 0 || absl::GetFlag(FLAGS_max_batch) <= 0) {
    std::fprintf(stderr, "layerpipe-coordinator: --prefill-chunk and --max-batch must be positive\n");
    return 2;
  }
  auto config = LoadModelConfig(model);
  if (!config.ok()) return Fail(std::string(config.status().message()));
  std::vector<std::string> workers = absl::StrSplit(absl::GetFlag(FLAGS_workers), ',', absl::SkipWhitespace());
  if (static_cast<int>(workers.size()) > config->num_layers) {
    std::fprintf(stderr, "layerpipe-coordinator: %zu workers for %d layers\n", workers.size(), config->num_layers);
    return 2;
  }
  std::vector<LayerRange> ranges;
  if (!absl::GetFlag(FLAGS_layer_split).empty()) {
    auto parsed = ParseLayerSplit(absl::GetFlag(FLAGS_layer_split), *config, static_cast<int>(workers.size()));
    if (!parsed.ok()) {
      std::fprintf(stderr, "layerpipe-coordinator: %s\n", std::string(parsed.status().message()).c_str());
      return 2;
    }
    ranges = *parsed;
  } else {
    ranges = PlanLayerRanges(*config, static_cast<int>(workers.size()));
  }
  std::unique_ptr<Tokenizer> tokenizer;
  if (std::filesystem::exists(model + "/tokenizer.json")) {
    auto t = Tokenizer::Load(model + "/tokenizer.json");
    if (!t.ok()) return Fail(std::string(t.status().message()));
    tokenizer = std::move(*t);
  } else {
    std::fprintf(stderr, "layerpipe-coordinator: no tokenizer.json in %s: only token ids are accepted\n", model.c_str());
  }
  auto stop_ids = ReadStopIdsFromGenerationConfig(model + "/generation_config.json");
  if (!stop_ids.ok()) return Fail(std::string(stop_ids.status().message()));

  // Block the shutdown signals in every thread; the main thread waits for them below.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  PipelineOptions popt;
  popt.model_dir = std::filesystem::absolute(model).string();
  popt.workers = workers;
  popt.ranges = ranges;
  popt.precision = precision;
  popt.prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  popt.max_batch = absl::GetFlag(FLAGS_max_batch);
  popt.recovery_deadline = absl::GetFlag(FLAGS_recovery_deadline);
  popt.step_timeout = absl::GetFlag(FLAGS_step_timeout);
  popt.health_interval = absl::GetFlag(FLAGS_health_interval);
  auto security = LoadCoordinatorSecurity(SecurityFlags());
  if (!security.ok()) return Fail(std::string(security.status().message()));
  for (const std::string& w : security->warnings) {
    std::fprintf(stderr, "layerpipe-coordinator: warning: %s\n", w.c_str());
  }
  popt.worker_credentials = security->workers;

  // The server must be listening before the workers are assigned: the last stage reports to it.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  Pipeline pipeline(*config, popt);
  // Served from the start: a coordinator waiting for its workers shows layerpipe_ready 0.
  auto metrics =
      ServeMetricsIfAsked(absl::GetFlag(FLAGS_metrics_listen), &pipeline.metrics(), "layerpipe-coordinator");
  if (!metrics.ok()) return Fail(absl::StrCat("--metrics-listen: ", metrics.status().message()));
  LayerPipeService api(*config, tokenizer.get(), *stop_ids, &pipeline, security->gate);
  StepSinkService sink(&pipeline);
  int port = 0;
  std::vector<grpc::Service*> api_services = {&api};
  if (!security->peer) api_services.push_back(&sink);  // else on its own port, below
  std::unique_ptr<grpc::Server> server = StartServer(listen, security->api, api_services, &port);
  if (!server || port == 0) return Fail(absl::StrCat("cannot listen on ", listen));
  server->GetHealthCheckService()->SetServingStatus(false);
  const std::string host = ReachableHost(listen);
  std::string self = absl::StrCat(host, ":", port);

  // StepSink on the peer port: the only service there, so mutual TLS can be required of every caller.
  std::unique_ptr<grpc::Server> peer_server;
  if (security->peer) {
    const std::string peer_listen = absl::GetFlag(FLAGS_peer_listen);
    int peer_port = 0;
    peer_server = StartServer(peer_listen, security->peer, {&sink}, &peer_port);
    if (!peer_server || peer_port == 0) return Fail(absl::StrCat("cannot listen on ", peer_listen, " (--peer-listen)"));
    self = absl::StrCat(ReachableHost(peer_listen), ":", peer_port);
    std::printf("layerpipe-coordinator peer port on %s\n", self.c_str());
    std::fflush(stdout);
  }
  if (!absl::GetFlag(FLAGS_advertise).empty()) self = absl::GetFlag(FLAGS_advertise);
  if (auto st = pipeline.Start(self, absl::GetFlag(FLAGS_startup_timeout)); !st.ok()) {
    server->Shutdown();
    return Fail(absl::StrCat("the pipeline did not start: ", st.message()));
  }
  for (size_t s = 0; s < ranges.size(); ++s) {
    std::fprintf(stderr, "layerpipe-coordinator: stage %zu at %s serves layers %d-%d\n", s, workers[s].c_str(),
                 ranges[s].begin, ranges[s].end - 1);
  }
  server->GetHealthCheckService()->SetServingStatus(true);
  std::printf("layerpipe-coordinator listening on %s:%d\n", host.c_str(), port);
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  const absl::Duration drain = absl::GetFlag(FLAGS_drain_timeout);
  std::fprintf(stderr, "layerpipe-coordinator: signal %d, draining (up to %s)\n", sig,
               absl::FormatDuration(drain).c_str());
  server->GetHealthCheckService()->SetServingStatus(false);
  if (!pipeline.Drain(drain)) {
    std::fprintf(stderr, "layerpipe-coordinator: drain timed out; cancelling what is left\n");
  }
  pipeline.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (peer_server) peer_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return 0;
}
