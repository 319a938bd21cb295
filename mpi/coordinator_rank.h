// What rank 0 of layerpipe-mpi does: learns the workers' addresses from the job, runs the coordinator
// over them in rank order, optionally runs a client command against it, and stops the whole job when
// the client exits, a signal arrives here, or a worker rank asks to stop.
#ifndef LAYERPIPE_MPI_COORDINATOR_RANK_H_
#define LAYERPIPE_MPI_COORDINATOR_RANK_H_

#include <string>
#include <vector>

#include "coordinator/run_coordinator.h"
#include "mpi/job_control.h"

namespace layerpipe {

// `settings.workers` is filled in here. `client`: the words after `--`, empty to serve until stopped.
// Returns the rank's exit status: the coordinator's when it failed, else the client's, else 0.
int RunCoordinatorRank(JobControl& job, CoordinatorSettings settings, const std::vector<std::string>& client);

}  // namespace layerpipe

#endif  // LAYERPIPE_MPI_COORDINATOR_RANK_H_
