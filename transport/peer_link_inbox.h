// The receive side of a device link (the send side is peer_link_hop.h): a stage accepts the previous
// stage's offer, joins the link in the background (the sender joins only once it has the reply), and
// takes each linked step's rows off the link exactly once, at the first sight of its frame. Links pair
// sends and receives in order, so even a frame that is refused later must be received; its rows are
// kept until the step is queued or dropped.
//
// One inbox per assignment. It owns the joining thread: Retire() makes a join in progress give up and
// aborts a joined link (a compute thread waiting for rows from a peer that is gone lets go), and the
// destructor waits for the thread, so nothing outlives the assignment.
#ifndef LAYERPIPE_TRANSPORT_PEER_LINK_INBOX_H_
#define LAYERPIPE_TRANSPORT_PEER_LINK_INBOX_H_

#include <atomic>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/layer_backend.h"
#include "transport/failed_links.h"

namespace layerpipe {

class PeerLinkInbox {
 public:
  PeerLinkInbox(std::shared_ptr<LayerBackend> backend, int64_t hidden_size,
                std::shared_ptr<FailedDeviceLinks> failed_links)
      : backend_(std::move(backend)), hidden_size_(hidden_size), failed_links_(std::move(failed_links)) {}
  PeerLinkInbox(const PeerLinkInbox&) = delete;
  PeerLinkInbox& operator=(const PeerLinkInbox&) = delete;
  ~PeerLinkInbox();

  // Accepts link `id` from the sender `sender_key` (FailedDeviceLinks::SenderKey) and starts joining
  // it. ALREADY_EXISTS when this assignment already took a link.
  absl::Status Open(const std::string& id, PeerLinkKind kind, std::string sender_key);

  // Receives the rows of step `step_id` (`rows` of them) off the link, waiting for the join; a resend of
  // a step already received is a no-op. FAILED_PRECONDITION when no link was opened. A link that fails
  // before it ever carried a step is noted in FailedDeviceLinks, so the sender's next offer is declined.
  absl::Status Receive(uint64_t step_id, int64_t rows);
  // The rows Receive kept for `step_id`, once; null when there are none.
  std::unique_ptr<DeviceRows> Take(uint64_t step_id);

  // Aborts the link from any thread; a join still in progress gives up. Idempotent.
  void Retire();
  bool retired() const { return retired_.load(std::memory_order_acquire); }

 private:
  const std::shared_ptr<LayerBackend> backend_;
  const int64_t hidden_size_;
  const std::shared_ptr<FailedDeviceLinks> failed_links_;

  std::mutex mu_;  // the link and the rows; held while receiving
  std::optional<std::shared_future<absl::StatusOr<std::shared_ptr<PeerLink>>>> link_;
  std::string sender_;
  bool carried_ = false;  // a step came over the link
  uint64_t last_step_ = 0;
  std::map<uint64_t, std::unique_ptr<DeviceRows>> rows_;

  // The joined link, for Retire (never blocked on, unlike mu_); `retired_` also makes a join give up.
  std::mutex retire_mu_;
  std::shared_ptr<PeerLink> joined_;
  std::atomic<bool> retired_{false};
  std::thread joiner_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_TRANSPORT_PEER_LINK_INBOX_H_
