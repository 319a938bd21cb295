// What each rank of layerpipe-mpi contributes to the start-up exchange, and what everyone reads from
// it: the workers' gRPC addresses in rank order, or which ranks could not start and why.
#ifndef LAYERPIPE_MPI_RANK_PROTOCOL_H_
#define LAYERPIPE_MPI_RANK_PROTOCOL_H_

#include <string>
#include <utility>
#include <vector>

namespace layerpipe {

std::string EncodeCoordinator();
std::string EncodeWorkerReady(const std::string& address);
std::string EncodeWorkerFailed(const std::string& why);

struct StartupReport {
  std::vector<std::string> worker_addresses;         // ranks 1..N-1, in order
  std::vector<std::pair<int, std::string>> failures;  // rank, why
};
// `all`: one entry per rank, rank 0 first.
StartupReport ParseStartup(const std::vector<std::string>& all);

}  // namespace layerpipe

#endif  // LAYERPIPE_MPI_RANK_PROTOCOL_H_
