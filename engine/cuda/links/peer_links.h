// The CUDA backend's two peer-link calls (LayerBackend::NewPeerLinkId and JoinPeerLink) over the two
// kinds of link: the sending stage cannot know which kind the next stage will join, so its id serves
// both (peer_link_id.h), and the join picks the CUDA IPC link on one device or NCCL across devices.
#ifndef LAYERPIPE_ENGINE_CUDA_LINKS_PEER_LINKS_H_
#define LAYERPIPE_ENGINE_CUDA_LINKS_PEER_LINKS_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/backend/device_handoff.h"

namespace layerpipe::cuda {

// An NCCL unique id (empty without NCCL) and a fresh IPC link name, in one id.
absl::StatusOr<std::string> NewEitherKindLinkId();

// Joins link `id` on `device` as LayerBackend::JoinPeerLink describes.
absl::StatusOr<std::unique_ptr<PeerLink>> JoinLinkOfKind(int device, const std::string& id, int rank,
                                                         PeerLinkKind kind, const std::atomic<bool>* give_up);

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_LINKS_PEER_LINKS_H_
