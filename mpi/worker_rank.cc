#include "mpi/worker_rank.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/host_name.h"
#include "common/log.h"
#include "transport/mpi/mpi_next_hop.h"
#include "transport/mpi/mpi_poll.h"
#include "mpi/rank_protocol.h"
#include "worker/worker_server.h"

namespace layerpipe {
namespace {

std::string AdvertisedAddress(const WorkerRankSettings& s, const WorkerServer& server) {
  std::string host = s.advertise_host;
  if (host.empty()) {
    host = HostOf(server.address());
    if (IsWildcardHost(host)) host = LocalHostName();
  }
  return absl::StrCat(host, ":", server.port());
}

// Waits for rank 0's stop; a signal here is passed on to rank 0, which stops the whole job.
void WaitForStop(JobControl& job) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  const timespec tick{0, 20 * 1000 * 1000};
  bool asked = false;
  while (!job.StopArrived()) {
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig > 0 && !asked) {
      LP_LOG(INFO) << "signal " << sig << ", asking rank 0 to stop the job";
      job.RequestStop(absl::StrCat("rank ", job.rank(), " got signal ", sig));
      asked = true;
    }
  }
}

}  // namespace

int RunWorkerRank(JobControl& job, FrameLink& link, const WorkerRankSettings& s) {
  WorkerOptions options;
  options.listen_address = s.listen;
  options.default_model_dir = s.model;
  options.threads = s.threads;
  options.kv_budget_bytes = s.kv_budget_bytes;

  // Everything that can fail at start is gathered into one message for rank 0.
  std::string failure;
  DeviceSpec device = s.device;
  if (s.device_per_local_rank && device.cuda() && CudaDevicesVisible() > 0) {
    device.ordinal = s.local_worker_index % CudaDevicesVisible();
  }
  auto maker = BackendMakerFor(device);
  if (maker.ok()) {
    options.make_backend = *maker;
  } else {
    failure = absl::StrCat("--device ", device.ToString(), ": ", maker.status().message());
  }
  // Filled in once the addresses are known, which is before rank 0 assigns anything. The mutex is
  // what orders that write before the read on a gRPC thread: the MPI barrier between them is no
  // synchronization in this process's memory model.
  struct Hops {
    std::mutex mu;
    NextHopFactory factory;
  };
  auto hops = std::make_shared<Hops>();
  options.next_hop = [hops](const internal::v1::AssignRequest& r) -> absl::StatusOr<std::shared_ptr<NextHop>> {
    NextHopFactory factory;
    {
      std::lock_guard<std::mutex> lock(hops->mu);
      factory = hops->factory;
    }
    if (!factory) return std::shared_ptr<NextHop>();
    return factory(r);
  };

  std::unique_ptr<WorkerServer> server;
  if (failure.empty()) {
    auto started = WorkerServer::Start(options);
    if (started.ok()) {
      server = std::move(*started);
    } else {
      failure = std::string(started.status().message());
    }
  }
  const std::vector<std::string> all =
      job.AllGather(failure.empty() ? EncodeWorkerReady(AdvertisedAddress(s, *server)) : EncodeWorkerFailed(failure));
  StartupReport report = ParseStartup(all);
  if (!report.failures.empty()) {
    // Rank 0 says which ranks failed and why; this rank only notes its own part.
    if (!failure.empty()) LP_LOG(ERROR) << "cannot start the worker: " << failure;
    if (server) server->Shutdown();
    job.Barrier();
    return 1;
  }
  std::map<std::string, int> rank_of_address;
  std::vector<int> peers;  // the other worker ranks: whoever might send this rank frames
  for (int r = 1; r < job.size(); ++r) {
    rank_of_address[report.worker_addresses[r - 1]] = r;
    if (r != job.rank()) peers.push_back(r);
  }
  {
    std::lock_guard<std::mutex> lock(hops->mu);
    hops->factory = MpiNextHopFactory(&link, rank_of_address, /*log_prefix=*/"");  // the log names the rank
  }
  job.Barrier();  // rank 0 assigns only after this: every worker knows the ranks by then
  LP_LOG(INFO) << "worker serving on " << report.worker_addresses[job.rank() - 1] << " (device "
               << device.ToString() << ")";

  WorkerService& service = server->service();
  std::atomic<bool> served{false};
  std::thread receiver([&] {
    link.ServeFrames([&](const internal::v1::StepFrame& f) { return service.TakeFrame(f); }, peers);
    served = true;
  });

  WaitForStop(job);
  // The outbox stops first, then the others learn that no more frames come from here; the receiver
  // keeps answering (UNAVAILABLE once the service has stopped) until every other worker has said so.
  // From here until every receiver is done (the barrier), verdicts sent to this rank are taken as
  // they come: a receiver waits for its verdicts to leave (FrameLink::TakeStrayVerdicts).
  server->Shutdown();
  link.SendClose(peers);
  while (!served) {
    link.TakeStrayVerdicts();
    MpiPollSleep();
  }
  receiver.join();
  job.Barrier([&] { link.TakeStrayVerdicts(); });
  link.Finish();
  LP_LOG(INFO) << "stopped; frames over mpi: " << link.frames_sent() << " sent, " << link.frames_received()
               << " received";
  return 0;
}

}  // namespace layerpipe
