#include "mpi/coordinator_rank.h"

#include <signal.h>
#include <time.h>

#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "mpi/client_command.h"
#include "mpi/rank_protocol.h"

namespace layerpipe {

int RunCoordinatorRank(JobControl& job, CoordinatorSettings settings, const std::vector<std::string>& client_words) {
  const StartupReport report = ParseStartup(job.AllGather(EncodeCoordinator()));
  if (!report.failures.empty()) {
    for (const auto& [rank, why] : report.failures) {
      LP_LOG(ERROR) << "the worker of rank " << rank << " did not start: " << why;
    }
    job.Barrier();
    return 1;
  }
  job.Barrier();  // the workers know each other's ranks from here on
  settings.workers = report.worker_addresses;
  LP_LOG(INFO) << "workers in rank order: " << absl::StrJoin(settings.workers, ",");

  std::optional<ClientCommand> client;
  if (!client_words.empty()) client.emplace(client_words, SiblingOrPath("layerpipe"));
  bool client_failed_to_start = false;

  CoordinatorHooks hooks;
  hooks.serving = [&](const std::string& address) {
    if (!client) return;
    if (auto st = client->Start(address); !st.ok()) {
      LP_LOG(ERROR) << st.message();
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
          LP_LOG(INFO) << "the client command exited with status " << *rc;
          return;
        }
      }
      int from = 0;
      std::string why;
      if (job.TakeStopRequest(&from, &why)) {
        LP_LOG(INFO) << "stopping the job: " << why;
        return;
      }
      const int sig = sigtimedwait(&signals, nullptr, &tick);
      if (sig > 0) {
        LP_LOG(INFO) << "signal " << sig << ", stopping the job";
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
