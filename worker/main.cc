// layerpipe-worker --listen ADDR [--model DIR] [--device cpu|cuda[:N]] [--threads N] [--kv-budget SIZE]
//
// Serves one stage of the pipeline: the coordinator assigns it a layer range over gRPC. Prints
// "layerpipe-worker listening on HOST:PORT" on stdout once serving (everything else goes to the log on
// stderr); exits 0 on SIGTERM or SIGINT. --help lists the flags, --version says which build this is.
#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "backend/backend_factory.h"
#include "common/log.h"
#include "common/metrics_http.h"
#include "common/server_flags.h"
#include "common/tls.h"
#include "worker/byte_size.h"
#include "worker/worker_server.h"

ABSL_FLAG(std::string, listen, "", "address to serve on, e.g. 0.0.0.0:7001 (port 0: any free port)");
ABSL_FLAG(std::string, model, "", "model directory used when an assignment names none");
ABSL_FLAG(int, threads, 0, "compute threads (0: LAYERPIPE_THREADS or all cores)");
ABSL_FLAG(std::string, device, "cpu", "where the assigned layers run: cpu, cuda or cuda:N");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(60),
          "on SIGTERM, how long held sequences may take to finish before the worker exits");
ABSL_FLAG(std::string, kv_budget, "", "KV cache budget, e.g. 8G or 512M (default: half the physical memory)");
ABSL_FLAG(std::string, prefix_cache_budget, "50%",
          "what the prefix cache may keep of the KV budget: a share (50%) or bytes (2G); 0 turns it off");
ABSL_FLAG(bool, huge_pages, true,
          "CPU stages: copy the weights into huge pages at load (faster steps; on AVX-512 BF16 CPUs in bf16 mode "
          "also stored in the matmul kernel's tiled order); false reads them in place from the mapped checkpoint "
          "(no copy, shared page cache)");
ABSL_FLAG(std::string, metrics_listen, "",
          "serve Prometheus metrics at http://HOST:PORT/metrics (port 0: any free port)");
// Mutual TLS (docs/security.md): all three or none.
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain: served, and presented to the next stage and the coordinator");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert");
ABSL_FLAG(std::string, tls_ca, "",
          "CA that signs the coordinator's and the other workers' certificates; callers without one are refused");


int main(int argc, char** argv) {
  layerpipe::ParseServerFlags(
      std::vector<std::string>(argv, argv + argc), "layerpipe-worker",
      "layerpipe-worker --listen ADDR [--model DIR] [--device cpu|cuda[:N]] [--threads N] [--kv-budget SIZE]");

  layerpipe::WorkerOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  if (options.listen_address.empty()) {
    LP_LOG(ERROR) << "--listen ADDR is required";
    return 2;
  }
  options.default_model_dir = absl::GetFlag(FLAGS_model);
  options.threads = absl::GetFlag(FLAGS_threads);
  if (options.threads < 0) {
    LP_LOG(ERROR) << "--threads must be >= 0";
    return 2;
  }
  // Checked before serving: a worker that cannot run its layers should not join a pipeline.
  auto device = layerpipe::ParseDevice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) {
    LP_LOG(ERROR) << "--device: " << device.status().message();
    return 2;
  }
  auto maker = layerpipe::BackendMakerFor(*device);
  if (!maker.ok()) {
    LP_LOG(ERROR) << "--device: " << maker.status().message();
    return 2;
  }
  options.make_backend = std::move(*maker);
  options.huge_pages = absl::GetFlag(FLAGS_huge_pages) && !device->cuda();
  const std::string budget = absl::GetFlag(FLAGS_kv_budget);
  if (!budget.empty()) {
    auto bytes = layerpipe::ParseByteSize(budget);
    if (!bytes.ok()) {
      LP_LOG(ERROR) << "--kv-budget: " << bytes.status().message();
      return 2;
    }
    options.kv_budget_bytes = *bytes;
  }
  auto prefix_budget = layerpipe::ParseSizeOrShare(absl::GetFlag(FLAGS_prefix_cache_budget));
  if (!prefix_budget.ok()) {
    LP_LOG(ERROR) << "--prefix-cache-budget: " << prefix_budget.status().message();
    return 2;
  }
  options.prefix_cache_share = prefix_budget->share;
  options.prefix_cache_bytes = prefix_budget->bytes;
  const layerpipe::TlsFiles tls{absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                                absl::GetFlag(FLAGS_tls_ca)};
  if (!tls.cert.empty() || !tls.key.empty() || !tls.ca.empty()) {
    auto creds = layerpipe::LoadMutualTls(tls);
    if (!creds.ok()) {
      LP_LOG(ERROR) << "--tls-cert/--tls-key/--tls-ca: " << creds.status().message();
      return 2;
    }
    options.server_credentials = creds->server;
    options.channel_credentials = creds->channel;
  }

  // Blocked before any thread starts, so every thread inherits the mask and only sigwait sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto server = layerpipe::WorkerServer::Start(options);
  if (!server.ok()) {
    LP_LOG(ERROR) << server.status().message();
    return 1;
  }
  auto metrics = layerpipe::ServeMetricsIfAsked(absl::GetFlag(FLAGS_metrics_listen), &(*server)->metrics());
  if (!metrics.ok()) {
    LP_LOG(ERROR) << "--metrics-listen: " << metrics.status().message();
    return 2;
  }
  // stdout, not the log: tools read the address from this line (common/child_process.cc, tests/).
  std::printf("layerpipe-worker listening on %s\n", (*server)->address().c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  // Drain: the sequences this stage holds finish first; whatever is left at the deadline is replayed
  // by the coordinator on the stage's replacement.
  const absl::Duration drain = absl::GetFlag(FLAGS_drain_timeout);
  LP_LOG(INFO) << "signal " << sig << ", draining (up to " << absl::FormatDuration(drain) << ")";
  if (!(*server)->Drain(drain)) LP_LOG(WARNING) << "drain timed out; sequences will be replayed";
  (*server)->Shutdown();
  (*server)->Wait();
  return 0;
}
