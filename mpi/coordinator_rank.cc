#include "mpi/coordinator_rank.h"

#include <signal.h>
#include <time.h>

#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mpi/client_command.h"
#include "mpi/rank_protocol.h"

namespace layerpipe {

int RunCoordinatorRank(JobControl& job, CoordinatorSettings settings, const std::vector<std::string>& client_words) {
  const std::string prefix = "layerpipe-mpi[rank 0]";
  const StartupReport report = ParseStartup(job.AllGather(EncodeCoordinator()));
  if (!report.failures.empty()) {
    for (const auto& [rank, why] : report.failures) {
      std::fprintf(stderr, "layerpipe-mpi: the worker of rank %d did not start: %s\n", rank, why.c_str());
    }
    job.Barrier();
    return 1;
  }
  job.Barrier();  // the workers know each other's ranks from here on
  settings.workers = report.worker_addresses;
  std::fprintf(stderr, "%s: workers in rank order: %s\n", prefix.c_str(),
               absl::StrJoin(settings.workers, ",").c_str());

  std::optional<ClientCommand> client;
  if (!client_words.empty()) client.emplace(client_words, SiblingOrPath("layerpipe"));
  bool client_failed_to_start = false;

  CoordinatorHooks hooks;
  hooks.serving = [&](const std::string& address) {
    if (!client) return;
    if (auto st = client->Start(address); !st.ok()) {
      std::fprintf(stderr, "layerpipe-mpi: %s\n", std::string(st.message()).c_str());
      client_failed_to_start = true;
    }
  };
  hooks.wait_for_stop = [&] {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    const timespec tick{0, 20 * 1000 * 1000};
    for (;;) {
      if (client_failed_to_start) return;
      if (client) {
        if (auto rc = client->Poll()) {
          std::fprintf(stderr, "%s: the client command exited with status %d\n", prefix.c_str(), *rc);
          return;
        }
      }
      int from = 0;
      std::string why;
      if (job.TakeStopRequest(&from, &why)) {
        std::fprintf(stderr, "%s: stopping the job: %s\n", prefix.c_str(), why.c_str());
        return;
      }
      const int sig = sigtimedwait(&signals, nullptr, &tick);
      if (sig > 0) {
        std::fprintf(stderr, "%s: signal %d, stopping the job\n", prefix.c_str(), sig);
        return;
      }
    }
  };
  int rc = RunCoordinator(settings, hooks);
  std::optional<int> client_rc;
  if (client) {
    client->Kill();  // it has exited already unless the job stopped for another reason
    client_rc = client->Poll();
  }
  job.SendStop();
  job.Barrier();
  job.DrainStray();
  if (rc != 0) return rc;
  if (client_failed_to_start) return 1;
  return client_rc.value_or(0);
}

}  // namespace layerpipe
