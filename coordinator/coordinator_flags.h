// The flags layerpipe-coordinator and layerpipe-mpi's rank 0 share (the model, the split, batching,
// deadlines, metrics), defined once so that both binaries take the same names with the same defaults.
// Each binary keeps the flags whose meaning or default differs (addresses, startup timeout, security).
#ifndef LAYERPIPE_COORDINATOR_COORDINATOR_FLAGS_H_
#define LAYERPIPE_COORDINATOR_COORDINATOR_FLAGS_H_

#include "coordinator/run_coordinator.h"

namespace layerpipe {

// Copies the shared flags' values into `settings`.
void ReadSharedCoordinatorFlags(CoordinatorSettings* settings);

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_COORDINATOR_FLAGS_H_
