// The NCCL peer link between two GPU stages (engine/backend/device_handoff.h): a two-rank communicator, rank 0
// sending to rank 1, with its own stream so transfers overlap the stages' compute. Without NCCL
// (LAYERPIPE_HAVE_NCCL unset) the factories below say so and nothing else is built.
#ifndef LAYERPIPE_ENGINE_CUDA_LINKS_NCCL_LINK_H_
#define LAYERPIPE_ENGINE_CUDA_LINKS_NCCL_LINK_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/backend/device_handoff.h"

#ifdef LAYERPIPE_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <deque>
#include <mutex>

#include "engine/cuda/device_rows.h"
#include "engine/cuda/stream.h"
#endif

namespace layerpipe::cuda {

// A fresh link id: an NCCL unique id as sizeof(ncclUniqueId) raw bytes. The calling process hosts the
// rendezvous, so it must live until both ends have joined.
absl::StatusOr<std::string> NewNcclLinkId();
// Joins link `id` on `device` as rank 0 (sender) or 1 (receiver); blocks until the peer has joined too,
// *give_up turns true (Cancelled) or kPeerLinkJoinTimeoutSeconds pass (DeadlineExceeded).
absl::StatusOr<std::unique_ptr<PeerLink>> JoinNcclLink(int device, const std::string& id, int rank,
                                                       const std::atomic<bool>* give_up);

#ifdef LAYERPIPE_HAVE_NCCL

class NcclPeerLink final : public PeerLink {
 public:
  NcclPeerLink(int device, int rank, ncclComm_t comm, std::shared_ptr<Stream> stream)
      : device_(device), rank_(rank), comm_(comm), stream_(std::move(stream)) {}
  NcclPeerLink(const NcclPeerLink&) = delete;
  NcclPeerLink& operator=(const NcclPeerLink&) = delete;
  // Aborts the communicator (destroying it would wait for a peer that may be gone), which ends the
  // transfers still queued; receives among them mark their rows lost.
  ~NcclPeerLink() override;

  absl::Status Send(std::shared_ptr<const DeviceRows> rows) override;
  absl::StatusOr<std::unique_ptr<DeviceRows>> Receive(int64_t rows, int64_t width) override;
  void Abort() override;
  std::string transport() const override { return "nccl"; }

 private:
  // A queued transfer: `done` is recorded after it on the link stream.
  struct Pending {
    cudaEvent_t done = nullptr;
    bool recorded = false;                      // `done` follows the transfer on the stream
    std::shared_ptr<const DeviceRows> sent;     // a send's rows, kept alive until `done`
    std::shared_ptr<std::atomic<bool>> lost;    // a receive's flag, raised if it is abandoned
  };

  // A send whose enqueue NCCL was still finishing (ncclInProgress) when Send returned: waits for it,
  // then records the pending transfers' events. Every NCCL call on the communicator comes after this.
  absl::Status FinishEnqueue();

  // Fails once the communicator has an asynchronous error (e.g. the peer went away).
  absl::Status Healthy();
  // Forgets the transfers that have completed, oldest first.
  void Reap();
  // Records a Pending's `done` event after what was just queued.
  absl::Status Track(Pending p);
  // Abort with mu_ held; once only.
  void AbortLocked();

  const int device_;
  const int rank_;
  ncclComm_t comm_;
  std::shared_ptr<Stream> stream_;
  std::mutex mu_;  // NCCL calls on one communicator must not race
  std::deque<Pending> pending_;
  bool aborted_ = false;
  // Raised by Abort before it takes mu_: a Send or Receive waiting (with mu_ held) for NCCL to finish
  // enqueuing gives up at once instead of holding Abort back for up to the join timeout.
  std::atomic<bool> abort_requested_{false};
  bool enqueue_in_progress_ = false;  // see FinishEnqueue
};

#endif  // LAYERPIPE_HAVE_NCCL

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_LINKS_NCCL_LINK_H_
