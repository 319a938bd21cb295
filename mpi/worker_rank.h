// What a worker rank (1..N-1) of layerpipe-mpi does: serves one pipeline stage with WorkerServer,
// publishes its gRPC address to the job, takes frames from the previous worker rank over MPI and
// hands frames to the next one over MPI, until rank 0 says stop.
#ifndef LAYERPIPE_MPI_WORKER_RANK_H_
#define LAYERPIPE_MPI_WORKER_RANK_H_

#include <cstdint>
#include <string>

#include "backend/backend_factory.h"
#include "transport/mpi/frame_link.h"
#include "mpi/job_control.h"

namespace layerpipe {

struct WorkerRankSettings {
  std::string listen = "127.0.0.1:0";  // the worker's gRPC control port
  // Host the other ranks dial; empty: the --worker-listen host, or this host's name for a wildcard.
  std::string advertise_host;
  std::string model;
  int threads = 0;
  int64_t kv_budget_bytes = 0;
  DeviceSpec device;
  bool device_per_local_rank = false;  // "--device cuda": the n-th worker rank of a node takes GPU n
  int local_worker_index = 0;          // among this node's worker ranks
};

// Returns the rank's exit status. Collective with rank 0's RunCoordinatorRank.
int RunWorkerRank(JobControl& job, FrameLink& link, const WorkerRankSettings& settings);

}  // namespace layerpipe

#endif  // LAYERPIPE_MPI_WORKER_RANK_H_
