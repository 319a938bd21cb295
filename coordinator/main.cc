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
#include "coordinator/api_service.h"
#include "coordinator/pipeline.h"
#include "coordinator/planner.h"
#include "engine/stop_conditions.h"
#include "engine/tokenizer.h"

ABSL_FLAG(std::string, listen, "", "address to serve clients on, e.g. 0.0.0.0:50051 or 127.0.0.1:0");
ABSL_FLAG(std::string, advertise, "", "address workers reach this coordinator at (default: from --listen)");
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

namespace {

int Fail(const std::string& msg) {
  std::fprintf(stderr, "layerpipe-coordinator: %s\n", msg.c_str());
  return 1;
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

  // The server must be listening before the workers are assigned: the last stage reports to it.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  Pipeline pipeline(*config, popt);
  LayerPipeService api(*config, tokenizer.get(), *stop_ids, &pipeline);
  StepSinkService sink(&pipeline);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(512 << 20);
  builder.SetMaxSendMessageSize(512 << 20);
  builder.RegisterService(&api);
  builder.RegisterService(&sink);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) return Fail(absl::StrCat("cannot listen on ", listen));
  server->GetHealthCheckService()->SetServingStatus(false);

  std::string host = listen.substr(0, listen.rfind(':'));
  if (host == "0.0.0.0" || host == "[::]" || host.empty()) host = "127.0.0.1";
  const std::string self = absl::GetFlag(FLAGS_advertise).empty() ? absl::StrCat(host, ":", port)
                                                                   : absl::GetFlag(FLAGS_advertise);
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
  return 0;
}
