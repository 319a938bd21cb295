// The whole life of a coordinator process after flag parsing: checks the settings, serves the client
// API, assigns the workers, waits for the signal to stop, drains. layerpipe-coordinator's main() and
// layerpipe-mpi's rank 0 both run it, so they behave the same.
#ifndef LAYERPIPE_COORDINATOR_RUN_COORDINATOR_H_
#define LAYERPIPE_COORDINATOR_RUN_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/coordinator_security.h"
#include "engine/model/precision.h"

namespace layerpipe {

// The coordinator's flags (coordinator/main.cc documents each).
struct CoordinatorSettings {
  std::string program = "layerpipe-coordinator";  // starts the "listening on" and "peer port on" lines
  std::string listen, advertise, model;
  // Host of the address the workers report to when `advertise` is empty (the port is the one bound).
  // Empty: the --listen host, with a wildcard read as 127.0.0.1.
  std::string advertise_host;
  std::vector<std::string> workers;  // pipeline order
  std::string layer_split;
  Precision precision = Precision::kBf16;
  std::string quantize = "none";  // --quantize: what every worker quantizes its decoder matrices into
  std::string quantize_head = "none";  // --quantize-head: and the embedding / tied head
  int64_t prefill_chunk = 256;
  int max_batch = 64;
  absl::Duration recovery_deadline = absl::Seconds(30);
  absl::Duration step_timeout = absl::Seconds(120);
  absl::Duration health_interval = absl::Seconds(1);
  absl::Duration drain_timeout = absl::Seconds(60);
  absl::Duration startup_timeout = absl::Seconds(120);
  std::string metrics_listen;
  // The OpenAI-compatible HTTP port (empty: none) and the model name it answers to (empty: the
  // checkpoint directory's name).
  std::string http_listen, served_model_name;
  int64_t max_model_len = 0;   // 0: the model's context
  int32_t max_new_tokens = 0;  // 0: no cap
  // Durable jobs: the directory of their database (empty: jobs live in memory only; the flag's default is
  // DefaultStateDir()), and how long finished jobs are kept.
  std::string state_dir;
  absl::Duration job_retention = absl::Hours(24);
  CoordinatorSecurityFlags security;
};

struct CoordinatorHooks {
  // Called once the pipeline serves, right after "PROGRAM listening on HOST:PORT" is printed, with
  // that HOST:PORT.
  std::function<void(const std::string& address)> serving;
  // Returns when the coordinator should drain and exit. Unset: the first SIGTERM or SIGINT.
  // RunCoordinator blocks both signals in the calling thread (and so in every thread it starts), so a
  // hook that wants them has to sigwait/sigtimedwait for them.
  std::function<void()> wait_for_stop;
};

// The process exit status: 0 after a clean shutdown, 2 for settings that make no sense, 1 for
// anything that failed at start.
int RunCoordinator(const CoordinatorSettings& settings, const CoordinatorHooks& hooks = {});

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_RUN_COORDINATOR_H_
