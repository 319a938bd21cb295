// The link id a CUDA stage offers the next one (LayerBackend::NewPeerLinkId): it carries what both
// kinds of link need, since the receiver picks the kind: an NCCL unique id (empty when the plugin
// has no NCCL) and the name of a CUDA IPC link's control block. Host-only, so tested without a GPU.
#ifndef LAYERPIPE_ENGINE_CUDA_LINKS_PEER_LINK_ID_H_
#define LAYERPIPE_ENGINE_CUDA_LINKS_PEER_LINK_ID_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace layerpipe::cuda {

struct PeerLinkId {
  std::string nccl;
  std::string ipc_name;
};

std::string EncodePeerLinkId(const std::string& nccl, const std::string& ipc_name);
// InvalidArgument for anything EncodePeerLinkId did not make.
absl::StatusOr<PeerLinkId> DecodePeerLinkId(const std::string& id);

// InvalidArgument unless rank is 0 (the sending end) or 1 (the receiving end).
absl::Status ValidatePeerLinkRank(int rank);

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_LINKS_PEER_LINK_ID_H_
