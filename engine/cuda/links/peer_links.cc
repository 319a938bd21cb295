#include "engine/cuda/links/peer_links.h"

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/links/ipc_link.h"
#include "engine/cuda/links/nccl_link.h"
#include "engine/cuda/links/peer_link_id.h"

namespace layerpipe::cuda {

absl::StatusOr<std::string> NewEitherKindLinkId() {
  absl::StatusOr<std::string> nccl = NewNcclLinkId();
  return EncodePeerLinkId(nccl.ok() ? *nccl : std::string(), NewIpcLinkName());
}

absl::StatusOr<std::unique_ptr<PeerLink>> JoinLinkOfKind(int device, const std::string& id, int rank,
                                                         PeerLinkKind kind, const std::atomic<bool>* give_up) {
  // Arguments first: a bad rank is the caller's mistake whichever links this plugin can make.
  LP_RETURN_IF_ERROR(ValidatePeerLinkRank(rank));
  absl::StatusOr<PeerLinkId> parts = DecodePeerLinkId(id);
  if (!parts.ok()) return parts.status();
  if (kind == PeerLinkKind::kSameDevice) return JoinIpcLink(device, parts->ipc_name, rank, give_up);
  if (parts->nccl.empty()) {
    return absl::UnimplementedError("the sending stage's CUDA plugin was built without NCCL: no link across devices");
  }
  return JoinNcclLink(device, parts->nccl, rank, give_up);
}

}  // namespace layerpipe::cuda
