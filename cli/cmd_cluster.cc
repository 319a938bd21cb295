// layerpipe cluster: a whole cluster on this machine. Starts N layerpipe-worker processes on ephemeral
// ports, then a layerpipe-coordinator over them, and supervises them: SIGINT/SIGTERM or the death of any of
// them stops all. With a client command after "--" it is one-shot: the command runs against the cluster
// and its exit status becomes ours.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "backend/backend_factory.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "common/child_process.h"
#include "common/self_path.h"
#include "engine/model/quantize.h"

namespace layerpipe::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<FlagSpec> Specs() {
  return {
      {"model", false, false, "checkpoint directory (required)"},
      {"workers", false, false, "number of worker processes (required)"},
      {"precision", false, false, "bf16 or fp32 (default: the coordinator's)"},
      {"quantize", false, false, "none (default), int8 or int4: every worker quantizes its decoder matrices at load"},
      {"quantize-head", false, false, "none (default) or int8: and the embedding / tied head (the int8 rule)"},
      {"listen", false, false, "coordinator address (default 127.0.0.1:0, an ephemeral port)"},
      {"threads-per-worker", false, false, "compute threads of each worker (default: cores / workers)"},
      {"device", false, false,
       "where each worker runs its layers: one of cpu, cuda, cuda:N for all, or a comma-separated list "
       "with one per worker (default cpu)"},
      {"layer-split", false, false, "layer ranges per worker, e.g. 0-4,5-5 (default: the coordinator's)"},
      {"startup-timeout", false, false, "seconds to wait for the cluster to serve (default 600)"},
      {"http-listen", false, false, "also serve the OpenAI-compatible HTTP API on HOST:PORT (docs/http.md)"},
      {"state-dir", false, false,
       "keep jobs in this directory, so that they survive a restart (default: the coordinator's, "
       "$LAYERPIPE_STATE_DIR else ~/.local/state/layerpipe; '' keeps them in memory)"},
  };
}

constexpr const char* kUsageTail =
    "  -- COMMAND ...  one-shot: run a client command (generate, score or job ...) against the cluster with\n"
    "                  --coordinator set, print its output, stop the cluster and exit with its status\n";

struct Config {
  std::string model;
  int workers = 0;
  std::string precision, quantize, quantize_head, listen, layer_split, http_listen;
  std::optional<std::string> state_dir;  // unset: the coordinator's default
  int threads_per_worker = 0;
  std::vector<std::string> devices;  // one per worker
  Clock::duration startup_timeout{};
  std::vector<std::string> client;  // the one-shot command, empty for a long-running cluster
};

absl::StatusOr<Config> ConfigFromArgs(const Args& args, std::vector<std::string> client) {
  Config c;
  auto model = args.String("model");
  if (!model.ok()) return model.status();
  c.model = *model;
  auto workers = args.Int("workers");
  if (!workers.ok()) return workers.status();
  if (*workers < 1 || *workers > 256) return absl::InvalidArgumentError("--workers must be in [1, 256]");
  c.workers = static_cast<int>(*workers);
  c.precision = args.StringOr("precision", "");
  if (!c.precision.empty() && c.precision != "bf16" && c.precision != "fp32") {
    return absl::InvalidArgumentError(absl::StrCat("--precision must be bf16 or fp32, got \"", c.precision, "\""));
  }
  c.listen = args.StringOr("listen", "127.0.0.1:0");
  c.layer_split = args.StringOr("layer-split", "");
  c.quantize = args.StringOr("quantize", "none");
  if (auto q = ParseQuantization(c.quantize); !q.ok()) return q.status();
  c.quantize_head = args.StringOr("quantize-head", "none");
  if (auto q = ParseHeadQuantization(c.quantize_head); !q.ok()) return q.status();
  c.http_listen = args.StringOr("http-listen", "");
  if (args.Has("state-dir")) c.state_dir = args.StringOr("state-dir", "");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto threads = args.Int("threads-per-worker", std::max(1, cores / c.workers));
  if (!threads.ok()) return threads.status();
  if (*threads < 1 || *threads > 1024) return absl::InvalidArgumentError("--threads-per-worker must be in [1, 1024]");
  c.threads_per_worker = static_cast<int>(*threads);
  const std::vector<std::string> devices = absl::StrSplit(args.StringOr("device", "cpu"), ',');
  if (devices.size() != 1 && static_cast<int>(devices.size()) != c.workers) {
    return absl::InvalidArgumentError(absl::StrCat("--device lists ", devices.size(), " devices for ", c.workers,
                                                   " workers (give one for all, or one per worker)"));
  }
  for (const std::string& d : devices) {
    auto spec = ParseDevice(d);
    if (!spec.ok()) return absl::InvalidArgumentError(absl::StrCat("--device: ", spec.status().message()));
    // Refused here rather than by each worker, so the message comes once and nothing starts.
    if (auto maker = BackendMakerFor(*spec); !maker.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("--device: ", maker.status().message()));
    }
  }
  for (int i = 0; i < c.workers; ++i) c.devices.push_back(devices.size() == 1 ? devices[0] : devices[i]);
  auto timeout = args.Double("startup-timeout", 600);
  if (!timeout.ok()) return timeout.status();
  if (*timeout <= 0) return absl::InvalidArgumentError("--startup-timeout must be positive");
  c.startup_timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*timeout));
  if (!client.empty()) {
    static const std::vector<std::string> kClientCommands = {"generate", "score", "job"};
    if (std::find(kClientCommands.begin(), kClientCommands.end(), client[0]) == kClientCommands.end()) {
      return absl::InvalidArgumentError(absl::StrCat("the command after -- must be generate, score or job, not \"",
                                                     client[0], "\""));
    }
    for (const std::string& a : client) {
      if (a == "--coordinator" || a.rfind("--coordinator=", 0) == 0) {
        return absl::InvalidArgumentError("the command after -- gets --coordinator from the cluster");
      }
    }
    c.client = std::move(client);
  }
  return c;
}

class Supervisor {
 public:
  Supervisor(Config config, std::filesystem::path self) : config_(std::move(config)), self_(std::move(self)) {}

  int Run() {
    // Signals are taken synchronously by the loop below; children get the original mask back.
    sigset_t wait_mask, child_mask;
    sigemptyset(&wait_mask);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&wait_mask, s);
    sigprocmask(SIG_BLOCK, &wait_mask, &child_mask);
    const int status = Loop(wait_mask, child_mask);
    StopAll();
    return status;
  }

 private:
  enum class Phase { kWorkers, kCoordinator, kServing };

  int Loop(const sigset_t& wait_mask, const sigset_t& child_mask) {
    // The worker and coordinator binaries are installed next to this one.
    auto worker_bin = SiblingExecutable("layerpipe-worker");
    if (!worker_bin.ok()) return Fail("cluster", worker_bin.status());
    auto coordinator_bin = SiblingExecutable("layerpipe-coordinator");
    if (!coordinator_bin.ok()) return Fail("cluster", coordinator_bin.status());
    ChildOptions server_options;
    server_options.capture_stdout = true;
    server_options.signal_mask = child_mask;
    ChildOptions client_options;
    client_options.signal_mask = child_mask;

    for (int i = 0; i < config_.workers; ++i) {
      auto w = ChildProcess::Start(
          absl::StrCat("worker ", i), *worker_bin,
          {*worker_bin, "--listen", "127.0.0.1:0", "--threads", absl::StrCat(config_.threads_per_worker), "--device",
           config_.devices[i]},
          server_options);
      if (!w.ok()) return Fail("cluster", w.status());
      workers_.push_back(*std::move(w));
    }
    const Clock::time_point deadline = Clock::now() + config_.startup_timeout;
    Phase phase = Phase::kWorkers;
    std::string coordinator_address;
    const timespec tick = {0, 50'000'000};
    for (;;) {
      siginfo_t info;
      const int sig = sigtimedwait(&wait_mask, &info, &tick);
      if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
        std::fprintf(stderr, "layerpipe cluster: got SIG%s; stopping the cluster\n", sigabbrev_np(sig));
        return client_ ? 128 + sig : 0;
      }
      if (client_ && client_->Poll()) return client_->ShellStatus();
      for (ChildProcess* c : Managed()) {
        if (c->Poll()) {
          std::fprintf(stderr, "layerpipe cluster: %s (pid %d) %s; stopping the cluster\n", c->name().c_str(),
                       static_cast<int>(c->pid()), c->DescribeExit().c_str());
          return 1;
        }
      }
      if (phase == Phase::kWorkers) {
        std::vector<std::string> addresses;
        for (const auto& w : workers_) {
          if (auto a = w->listening_address()) addresses.push_back(*a);
        }
        if (addresses.size() == workers_.size()) {
          for (size_t i = 0; i < addresses.size(); ++i) {
            std::fprintf(stderr, "layerpipe cluster: worker %zu listening on %s\n", i, addresses[i].c_str());
          }
          std::vector<std::string> argv = {*coordinator_bin, "--listen", config_.listen, "--model", config_.model,
                                           "--workers", absl::StrJoin(addresses, ",")};
          // absl spells flags with underscores; the dashed spelling is only an alias where a binary adds it.
          if (!config_.layer_split.empty()) argv.insert(argv.end(), {"--layer-split", config_.layer_split});
          argv.insert(argv.end(), {"--quantize", config_.quantize, "--quantize_head", config_.quantize_head});
          if (!config_.precision.empty()) argv.insert(argv.end(), {"--precision", config_.precision});
          if (!config_.http_listen.empty()) argv.insert(argv.end(), {"--http_listen", config_.http_listen});
          if (config_.state_dir) argv.push_back("--state_dir=" + *config_.state_dir);
          auto c = ChildProcess::Start("coordinator", *coordinator_bin, argv, server_options);
          if (!c.ok()) return Fail("cluster", c.status());
          coordinator_ = *std::move(c);
          phase = Phase::kCoordinator;
        }
      } else if (phase == Phase::kCoordinator) {
        if (auto a = coordinator_->listening_address()) {
          coordinator_address = *a;
          phase = Phase::kServing;
          // In one-shot mode stdout belongs to the client command.
          std::FILE* out = config_.client.empty() ? stdout : stderr;
          std::fprintf(out, "cluster ready: coordinator at %s (%d workers)\n", coordinator_address.c_str(),
                       config_.workers);
          std::fflush(out);
          if (!config_.client.empty()) {
            std::vector<std::string> argv = {self_.string()};
            argv.insert(argv.end(), config_.client.begin(), config_.client.end());
            argv.insert(argv.end(), {"--coordinator", coordinator_address});
            auto c = ChildProcess::Start("client", self_.string(), argv, client_options);
            if (!c.ok()) return Fail("cluster", c.status());
            client_ = *std::move(c);
          }
        }
      }
      if (phase != Phase::kServing && Clock::now() > deadline) {
        return Fail("cluster", absl::DeadlineExceededError(
                                   phase == Phase::kWorkers ? "the workers did not start listening in time"
                                                            : "the coordinator did not become ready in time"));
      }
    }
  }

  std::vector<ChildProcess*> Managed() {
    std::vector<ChildProcess*> all;
    for (auto& w : workers_) all.push_back(w.get());
    if (coordinator_) all.push_back(coordinator_.get());
    return all;
  }

  // SIGTERM to everyone, a grace period, then SIGKILL for whoever is left (in the destructors).
  void StopAll() {
    std::vector<ChildProcess*> all = Managed();
    if (client_) all.push_back(client_.get());
    for (ChildProcess* c : all) c->Signal(SIGTERM);
    const Clock::time_point grace = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < grace &&
           !std::all_of(all.begin(), all.end(), [](ChildProcess* c) { return c->Poll(); })) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    client_.reset();
    coordinator_.reset();
    workers_.clear();
  }

  const Config config_;
  const std::filesystem::path self_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::unique_ptr<ChildProcess> coordinator_;
  std::unique_ptr<ChildProcess> client_;
};

}  // namespace

int RunCluster(const std::vector<std::string>& argv) {
  const auto dashdash = std::find(argv.begin(), argv.end(), "--");
  const std::vector<std::string> own(argv.begin(), dashdash);
  std::vector<std::string> client;
  if (dashdash != argv.end()) client.assign(dashdash + 1, argv.end());
  if (std::find(own.begin(), own.end(), "--help") != own.end()) {
    std::vector<FlagSpec> specs = Specs();
    specs.push_back({"help", true, false, "show this help"});
    std::printf("%s%s", Usage("cluster", specs).c_str(), kUsageTail);
    return 0;
  }
  int code = 0;
  auto args = ParseOrExit("cluster", own, Specs(), &code);
  if (!args) return code;
  if (dashdash != argv.end() && client.empty()) {
    return Fail("cluster", absl::InvalidArgumentError("-- must be followed by a client command"));
  }
  auto config = ConfigFromArgs(*args, std::move(client));
  if (!config.ok()) return Fail("cluster", config.status());
  auto self = SelfPath();
  if (!self.ok()) return Fail("cluster", self.status());
  return Supervisor(*std::move(config), *std::move(self)).Run();
}

}  // namespace layerpipe::cli
