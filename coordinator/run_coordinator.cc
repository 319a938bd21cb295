#include "coordinator/run_coordinator.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/host_name.h"
#include "common/log.h"
#include "common/metrics_http.h"
#include "coordinator/api_service.h"
#include "coordinator/http/http_server.h"
#include "coordinator/pipeline.h"
#include "coordinator/scheduling/planner.h"
#include "engine/sampling/stop_conditions.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/model/quantize.h"

namespace layerpipe {
namespace {

// Largest message sent (full logits of a scored prompt) and taken by StepSink (a last stage's results).
constexpr int kMaxResultBytes = 512 << 20;

// A server on `listen` for `services`; *port is the port bound (0 when it could not listen).
std::unique_ptr<grpc::Server> StartServer(const std::string& listen,
                                          const std::shared_ptr<grpc::ServerCredentials>& credentials,
                                          const std::vector<grpc::Service*>& services, int* port,
                                          int64_t max_receive_bytes = kMaxResultBytes) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, credentials, port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<int64_t>(max_receive_bytes, kMaxResultBytes)));
  builder.SetMaxSendMessageSize(kMaxResultBytes);
  for (grpc::Service* s : services) builder.RegisterService(s);
  return builder.BuildAndStart();
}

// The host part of a listen address, as something others can dial.
std::string ReachableHost(const std::string& listen) {
  const std::string host = HostOf(listen);
  return IsWildcardHost(host) ? "127.0.0.1" : host;
}

}  // namespace

int RunCoordinator(const CoordinatorSettings& s, const CoordinatorHooks& hooks) {
  // Messages go to the log, which names the program; stdout has only the lines tools read (the
  // "listening on" and "peer port on" lines).
  const char* program = s.program.c_str();
  auto fail = [&](const std::string& msg) {
    LP_LOG(ERROR) << msg;
    return 1;
  };
  auto usage = [&](const std::string& msg) {
    LP_LOG(ERROR) << msg;
    return 2;
  };
  if (s.listen.empty() || s.model.empty() || s.workers.empty()) {
    return usage("--listen, --model and --workers are required");
  }
  if (s.prefill_chunk <= 0 || s.max_batch <= 0) return usage("--prefill-chunk and --max-batch must be positive");
  auto config = LoadModelConfig(s.model);
  if (!config.ok()) return fail(std::string(config.status().message()));
  const int workers = static_cast<int>(s.workers.size());
  if (workers > config->num_layers) {
    return usage(absl::StrCat(workers, " workers for ", config->num_layers, " layers"));
  }
  std::vector<LayerRange> ranges;
  if (!s.layer_split.empty()) {
    auto parsed = ParseLayerSplit(s.layer_split, *config, workers);
    if (!parsed.ok()) return usage(std::string(parsed.status().message()));
    ranges = *parsed;
  } else {
    ranges = PlanLayerRanges(*config, workers);
  }
  std::unique_ptr<Tokenizer> tokenizer;
  if (std::filesystem::exists(s.model + "/tokenizer.json")) {
    auto t = Tokenizer::Load(s.model + "/tokenizer.json");
    if (!t.ok()) return fail(std::string(t.status().message()));
    tokenizer = std::move(*t);
  } else {
    LP_LOG(WARNING) << "no tokenizer.json in " << s.model << ": only token ids are accepted";
  }
  auto stop_ids = ReadStopIdsFromGenerationConfig(s.model + "/generation_config.json");
  if (!stop_ids.ok()) return fail(std::string(stop_ids.status().message()));

  // Block the shutdown signals in every thread started from here on; the default wait below takes them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  PipelineOptions popt;
  popt.model_dir = std::filesystem::absolute(s.model).string();
  popt.workers = s.workers;
  popt.ranges = ranges;
  popt.precision = s.precision;
  auto quantize = ParseQuantization(s.quantize);
  if (!quantize.ok()) return fail(std::string(quantize.status().message()));
  popt.quantize = *quantize;
  auto quantize_head = ParseHeadQuantization(s.quantize_head);
  if (!quantize_head.ok()) return fail(std::string(quantize_head.status().message()));
  popt.quantize_head = *quantize_head;
  popt.prefill_chunk = s.prefill_chunk;
  popt.max_batch = s.max_batch;
  popt.recovery_deadline = s.recovery_deadline;
  popt.step_timeout = s.step_timeout;
  popt.health_interval = s.health_interval;
  auto security = LoadCoordinatorSecurity(s.security);
  if (!security.ok()) return fail(std::string(security.status().message()));
  for (const std::string& w : security->warnings) LP_LOG(WARNING) << w;
  popt.worker_credentials = security->workers;

  // The server must be listening before the workers are assigned: the last stage reports to it.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  Pipeline pipeline(*config, popt);
  // Served from the start: a coordinator waiting for its workers shows layerpipe_ready 0.
  auto metrics = ServeMetricsIfAsked(s.metrics_listen, &pipeline.metrics());
  if (!metrics.ok()) return fail(absl::StrCat("--metrics-listen: ", metrics.status().message()));
  if (s.max_model_len < 0 || s.max_model_len > config->max_position_embeddings) {
    return usage(absl::StrCat("--max-model-len must be in [0, ", config->max_position_embeddings, "] (the model's context)"));
  }
  if (s.max_new_tokens < 0) return usage("--max-new-tokens must be >= 0");
  if (s.job_retention <= absl::ZeroDuration()) return usage("--job-retention must be positive");
  // Opened before anything serves: a database that is not ours stops the start, with its path.
  std::unique_ptr<JobStore> job_store;
  if (!s.state_dir.empty()) {
    auto store = JobStore::Open(s.state_dir);
    if (!store.ok()) return fail(absl::StrCat("--state-dir: ", store.status().message()));
    job_store = *std::move(store);
    LP_LOG(INFO) << "jobs are kept in " << std::filesystem::absolute(s.state_dir).lexically_normal().string();
  } else {
    LP_LOG(WARNING) << "--state-dir '': jobs are kept in memory only; a restart of this coordinator loses every job";
  }
  ClientApi client_api(*config, tokenizer.get(), *stop_ids, &pipeline, security->gate,
                       ClientLimits{s.max_model_len, s.max_new_tokens});
  JobJournalOptions jobs;
  jobs.retention = s.job_retention;
  client_api.EnableJobs(job_store.get(), jobs);
  LayerPipeService api(&client_api);
  StepSinkService sink(&pipeline);
  int port = 0;
  std::vector<grpc::Service*> api_services = {&api};
  if (!security->peer) api_services.push_back(&sink);  // else on its own port, below
  // Clients' messages are bounded by what a request can need, unless StepSink's results share the port.
  std::unique_ptr<grpc::Server> server =
      StartServer(s.listen, security->api, api_services, &port, security->peer ? client_api.MaxRequestBytes() : kMaxResultBytes);
  if (!server || port == 0) return fail(absl::StrCat("cannot listen on ", s.listen));
  server->GetHealthCheckService()->SetServingStatus(false);
  const std::string host = ReachableHost(s.listen);
  std::string self = absl::StrCat(s.advertise_host.empty() ? host : s.advertise_host, ":", port);

  // StepSink on the peer port: the only service there, so mutual TLS can be required of every caller.
  std::unique_ptr<grpc::Server> peer_server;
  if (security->peer) {
    int peer_port = 0;
    peer_server = StartServer(s.security.peer_listen, security->peer, {&sink}, &peer_port);
    if (!peer_server || peer_port == 0) {
      return fail(absl::StrCat("cannot listen on ", s.security.peer_listen, " (--peer-listen)"));
    }
    self = absl::StrCat(s.advertise_host.empty() ? ReachableHost(s.security.peer_listen) : s.advertise_host, ":",
                        peer_port);
    std::printf("%s peer port on %s\n", program, self.c_str());
    std::fflush(stdout);
  }
  if (!s.advertise.empty()) self = s.advertise;
  std::unique_ptr<http::HttpServer> http_server;
  if (!s.http_listen.empty()) {
    http::HttpOptions hopt;
    hopt.listen = s.http_listen;
    hopt.tls = {s.security.tls_cert, s.security.tls_key, s.security.tls_client_ca};
    auto defaults = http::ReadOpenAiDefaults(s.model + "/generation_config.json");
    if (!defaults.ok()) return fail(std::string(defaults.status().message()));
    hopt.defaults = *defaults;
    // The directory's own name, as vLLM names a model by its path's last part.
    std::filesystem::path dir = std::filesystem::absolute(s.model).lexically_normal();
    if (dir.filename().empty()) dir = dir.parent_path();
    hopt.defaults.model = s.served_model_name.empty() ? dir.filename().string() : s.served_model_name;
    http_server = std::make_unique<http::HttpServer>(&client_api, hopt);
    if (auto st = http_server->Start(); !st.ok()) return fail(std::string(st.message()));
    std::printf("%s http port on %s:%d\n", program, ReachableHost(s.http_listen).c_str(), http_server->port());
    std::fflush(stdout);
  }
  if (auto st = pipeline.Start(self, s.startup_timeout); !st.ok()) {
    server->Shutdown();
    return fail(absl::StrCat("the pipeline did not start: ", st.message()));
  }
  if (auto st = client_api.StartJobs(); !st.ok()) {
    server->Shutdown();
    return fail(absl::StrCat("--state-dir: cannot restore the jobs: ", st.message()));
  }
  for (size_t i = 0; i < ranges.size(); ++i) {
    LP_LOG(INFO) << "stage " << i << " at " << s.workers[i] << " serves layers " << ranges[i].begin << "-"
                 << ranges[i].end - 1;
  }
  server->GetHealthCheckService()->SetServingStatus(true);
  const std::string address = absl::StrCat(host, ":", port);
  std::printf("%s listening on %s\n", program, address.c_str());
  std::fflush(stdout);
  if (hooks.serving) hooks.serving(address);

  if (hooks.wait_for_stop) {
    hooks.wait_for_stop();
    LP_LOG(INFO) << "stopping, draining (up to " << absl::FormatDuration(s.drain_timeout) << ")";
  } else {
    int sig = 0;
    sigwait(&signals, &sig);
    LP_LOG(INFO) << "signal " << sig << ", draining (up to " << absl::FormatDuration(s.drain_timeout) << ")";
  }
  server->GetHealthCheckService()->SetServingStatus(false);
  if (!pipeline.Drain(s.drain_timeout)) {
    LP_LOG(WARNING) << "drain timed out; cancelling what is left";
  }
  if (http_server) http_server->Stop();
  pipeline.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (peer_server) peer_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return 0;
}

}  // namespace layerpipe
