// mpirun -np N layerpipe-mpi --model DIR [--listen ADDR] [--layer-split R] [--precision P] [--threads T]
//        [--kv-budget SIZE] [--device cpu|cuda|cuda:N] [-- CLIENT COMMAND...]
//
// One MPI job is a whole cluster: rank 0 is the coordinator (the client API, as layerpipe-coordinator),
// ranks 1..N-1 are the pipeline stages in rank order (as layerpipe-worker). The workers' gRPC control
// addresses are exchanged over MPI, and activations go from one worker rank to the next over MPI.
// With a client command (a `layerpipe` client subcommand), rank 0 runs it against the cluster and the
// job ends with its status; without one the job serves until SIGTERM/SIGINT reaches any rank.
// Every rank logs as "layerpipe-mpi[rank N]"; --help lists the flags, --version says which build this is.
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "backend/backend_factory.h"
#include "common/host_name.h"
#include "common/log.h"
#include "common/server_flags.h"
#include "coordinator/coordinator_flags.h"
#include "coordinator/run_coordinator.h"
#include "mpi/client_command.h"
#include "mpi/coordinator_rank.h"
#include "transport/mpi/frame_link.h"
#include "mpi/job_control.h"
#include "transport/mpi/mpi_poll.h"
#include "mpi/worker_rank.h"
#include "worker/byte_size.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "rank 0: address to serve clients on (port 0: any free port)");
ABSL_FLAG(std::string, advertise, "",
          "rank 0: address the last worker reports to (default: this host's name and the --listen port "
          "when --listen is a wildcard, else --listen)");
ABSL_FLAG(absl::Duration, startup_timeout, absl::Seconds(300), "how long rank 0 waits for the workers to load");
ABSL_FLAG(std::string, worker_listen, "127.0.0.1:0",
          "worker ranks: gRPC control address (use 0.0.0.0:0 when ranks span several hosts)");
ABSL_FLAG(std::string, worker_advertise_host, "",
          "worker ranks: host the other ranks dial (default: the --worker-listen host, or this host's name "
          "for a wildcard)");
ABSL_FLAG(int, threads, 0, "compute threads per worker rank (0: LAYERPIPE_THREADS or all cores)");
ABSL_FLAG(std::string, kv_budget, "", "KV cache budget per worker rank, e.g. 8G (default: half the memory)");
ABSL_FLAG(std::string, device, "cpu",
          "cpu, cuda:N, or cuda (the n-th worker rank on a node takes that node's GPU n)");
ABSL_FLAG(int, mpi_poll_us, 100, "sleep between polls of MPI while waiting, in microseconds");

namespace {

using namespace layerpipe;

// Settings every rank checks the same way, so all of them agree on refusing.
struct Parsed {
  CoordinatorSettings coordinator;
  WorkerRankSettings worker;
  std::string error;
};

Parsed ParseSettings() {
  Parsed p;
  CoordinatorSettings& c = p.coordinator;
  c.program = "layerpipe-mpi";
  ReadSharedCoordinatorFlags(&c);
  c.listen = absl::GetFlag(FLAGS_listen);
  c.advertise = absl::GetFlag(FLAGS_advertise);
  c.startup_timeout = absl::GetFlag(FLAGS_startup_timeout);
  if (IsWildcardHost(HostOf(c.listen))) c.advertise_host = LocalHostName(/*fallback=*/"");

  WorkerRankSettings& w = p.worker;
  w.listen = absl::GetFlag(FLAGS_worker_listen);
  w.advertise_host = absl::GetFlag(FLAGS_worker_advertise_host);
  w.model = c.model;
  w.threads = absl::GetFlag(FLAGS_threads);
  if (c.model.empty()) {
    p.error = "--model DIR is required";
  } else if (w.threads < 0) {
    p.error = "--threads must be >= 0";
  } else if (absl::GetFlag(FLAGS_mpi_poll_us) < 1 || absl::GetFlag(FLAGS_mpi_poll_us) > 100000) {
    p.error = "--mpi-poll-us must be within 1..100000";
  }
  const std::string budget = absl::GetFlag(FLAGS_kv_budget);
  if (p.error.empty() && !budget.empty()) {
    auto bytes = ParseByteSize(budget);
    if (bytes.ok()) {
      w.kv_budget_bytes = *bytes;
    } else {
      p.error = absl::StrCat("--kv-budget: ", bytes.status().message());
    }
  }
  const std::string device = absl::GetFlag(FLAGS_device);
  auto spec = ParseDevice(device);
  if (p.error.empty() && !spec.ok()) p.error = absl::StrCat("--device: ", spec.status().message());
  if (spec.ok()) w.device = *spec;
  w.device_per_local_rank = device == "cuda";
  return p;
}

// Index of this worker rank among the worker ranks on its node (collective; rank 0 gets 0).
int LocalWorkerIndex(int rank) {
  MPI_Comm workers = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? MPI_UNDEFINED : 0, rank, &workers);
  if (workers == MPI_COMM_NULL) return 0;
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(workers, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int index = 0;
  MPI_Comm_rank(node, &index);
  MPI_Comm_free(&node);
  MPI_Comm_free(&workers);
  return index;
}

int Run(const std::vector<std::string>& client) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Parsed p = ParseSettings();
  // Checked here, where every rank refuses together, rather than by rank 0 once the cluster serves.
  if (p.error.empty() && !client.empty()) {
    if (absl::Status st = ClientCommand(client, "layerpipe").Check(); !st.ok()) p.error = std::string(st.message());
  }
  if (!p.error.empty()) {
    if (rank == 0) LP_LOG(ERROR) << p.error;
    return 2;
  }
  if (size < 2) {
    LP_LOG(ERROR) << "needs at least 2 ranks (rank 0 is the coordinator, ranks 1.. are workers); got -np " << size;
    return 1;
  }
  SetMpiPollInterval(std::chrono::microseconds(absl::GetFlag(FLAGS_mpi_poll_us)));
  p.worker.local_worker_index = LocalWorkerIndex(rank);
  JobControl job(MPI_COMM_WORLD);
  FrameLink link(MPI_COMM_WORLD);
  if (rank == 0) return RunCoordinatorRank(job, p.coordinator, client);
  return RunWorkerRank(job, link, p.worker);
}

}  // namespace

int main(int argc, char** argv) {
  // The client command is not ours to parse.
  std::vector<std::string> args(argv, argv + argc), client;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--") {
      client.assign(args.begin() + i + 1, args.end());
      args.resize(i);
      break;
    }
  }
  ParseServerFlags(std::move(args), "layerpipe-mpi",
                   "mpirun -np N layerpipe-mpi --model DIR [--listen ADDR] [--layer-split R] [--precision P] "
                   "[--threads T] [--kv-budget SIZE] [--device cpu|cuda|cuda:N] [-- CLIENT COMMAND...]");

  // Blocked before MPI starts its own threads, so that only the rank's wait loop ever takes them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // mpirun interleaves the ranks' stderr: every line says which rank wrote it, the shared code's too.
  SetLogProgramName(absl::StrCat("layerpipe-mpi[rank ", rank, "]"));
  if (provided < MPI_THREAD_MULTIPLE) {
    if (rank == 0) {
      LP_LOG(ERROR) << "the MPI library offers thread level " << provided << ", below MPI_THREAD_MULTIPLE ("
                    << MPI_THREAD_MULTIPLE
                    << "), which layerpipe-mpi needs (several threads of a rank send and receive)";
    }
    MPI_Finalize();
    return 1;
  }
  const int rc = Run(client);
  MPI_Finalize();
  return rc;
}
