#include "transport/mpi/mpi_next_hop.h"

#include <memory>

#include "common/log.h"

namespace layerpipe {

grpc::Status MpiNextHop::Send(grpc::ClientContext* ctx, const internal::v1::StepFrame& frame) {
  if (cancelled_) return grpc::Status(grpc::StatusCode::CANCELLED, "the worker is shutting down");
  return link_->SendFrame(dest_, frame, ctx->deadline(), cancelled_);
}

NextHopFactory MpiNextHopFactory(FrameLink* link, std::map<std::string, int> rank_of_address, std::string log_prefix) {
  return [link, ranks = std::move(rank_of_address),
          prefix = std::move(log_prefix)](const internal::v1::AssignRequest& r) -> absl::StatusOr<std::shared_ptr<NextHop>> {
    auto it = ranks.find(r.next_address());
    if (it == ranks.end() || it->second == link->rank()) {
      LP_LOG(INFO) << prefix << (prefix.empty() ? "" : ": ") << "stage " << r.stage() << " hands frames to "
                   << r.next_address() << " over grpc";
      return std::shared_ptr<NextHop>();
    }
    LP_LOG(INFO) << prefix << (prefix.empty() ? "" : ": ") << "stage " << r.stage() << " hands frames to "
                 << r.next_address() << " over mpi (rank " << it->second << ")";
    return std::shared_ptr<NextHop>(std::make_shared<MpiNextHop>(link, it->second));
  };
}

}  // namespace layerpipe
