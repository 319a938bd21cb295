// The peer link between two stages on one GPU (engine/backend/device_handoff.h, PeerLinkKind::kSameDevice),
// which NCCL cannot serve (it refuses two ranks on one device). The sender keeps a ring of slot buffers
// and events exported with CUDA IPC; a shared-memory control block (POSIX shm, named in the link id)
// carries their handles and two counters. A transfer is two device-to-device copies — rows into a slot
// on the sender's link stream, slot into fresh rows on the receiver's — ordered by the slot's events,
// so neither end's host waits for the GPU; the counters only keep the sender from refilling a slot
// whose copy-out the receiver has not queued yet.
#ifndef LAYERPIPE_ENGINE_CUDA_LINKS_IPC_LINK_H_
#define LAYERPIPE_ENGINE_CUDA_LINKS_IPC_LINK_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/backend/device_handoff.h"

namespace layerpipe::cuda {

// A fresh name for the link's control block, unique on this host.
std::string NewIpcLinkName();

// Joins the link named `name` on `device` as rank 0 (sender: creates the control block and the
// exported resources) or 1 (receiver: opens them); blocks until the other end has joined, *give_up
// turns true (Cancelled) or kPeerLinkJoinTimeoutSeconds pass (DeadlineExceeded). Both ends may be in
// one process (then the receiver uses the sender's pointers and events directly, since CUDA IPC does
// not open handles in the process that made them).
absl::StatusOr<std::unique_ptr<PeerLink>> JoinIpcLink(int device, const std::string& name, int rank,
                                                      const std::atomic<bool>* give_up);

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_LINKS_IPC_LINK_H_
