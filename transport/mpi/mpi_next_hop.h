// The NextHop between two worker ranks of one layerpipe-mpi job, and the factory that picks it
// whenever an assignment's next_address is another worker rank of the job.
#ifndef LAYERPIPE_TRANSPORT_MPI_MPI_NEXT_HOP_H_
#define LAYERPIPE_TRANSPORT_MPI_MPI_NEXT_HOP_H_

#include <atomic>
#include <map>
#include <string>

#include "transport/mpi/frame_link.h"
#include "transport/next_hop.h"

namespace layerpipe {

class MpiNextHop final : public NextHop {
 public:
  MpiNextHop(FrameLink* link, int dest) : link_(link), dest_(dest) {}
  grpc::Status Send(grpc::ClientContext* ctx, const internal::v1::StepFrame& frame) override;
  void Cancel() override { cancelled_ = true; }
  std::string transport() const override { return "mpi"; }
  int dest() const { return dest_; }

 private:
  FrameLink* link_;
  const int dest_;
  std::atomic<bool> cancelled_{false};
};

// Worker gRPC addresses (as the coordinator was given them) → rank. `link` must outlive the hops.
// Logs each choice on stderr, prefixed with `log_prefix`.
NextHopFactory MpiNextHopFactory(FrameLink* link, std::map<std::string, int> rank_of_address, std::string log_prefix);

}  // namespace layerpipe

#endif  // LAYERPIPE_TRANSPORT_MPI_MPI_NEXT_HOP_H_
