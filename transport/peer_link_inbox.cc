#include "transport/peer_link_inbox.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace layerpipe {

PeerLinkInbox::~PeerLinkInbox() {
  Retire();
  if (joiner_.joinable()) joiner_.join();
}

absl::Status PeerLinkInbox::Open(const std::string& id, PeerLinkKind kind, std::string sender_key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (link_.has_value()) return absl::AlreadyExistsError("a link was already opened");
  sender_ = std::move(sender_key);
  auto joined = std::make_shared<std::promise<absl::StatusOr<std::shared_ptr<PeerLink>>>>();
  link_ = joined->get_future().share();
  joiner_ = std::thread([this, joined, id, kind] {
    auto link = backend_->JoinPeerLink(id, /*rank=*/1, kind, &retired_);
    if (!link.ok()) {
      if (!retired()) failed_links_->Note(sender_, link.status());
      joined->set_value(link.status());
      return;
    }
    std::shared_ptr<PeerLink> shared(std::move(*link));
    {
      std::lock_guard<std::mutex> retire_lock(retire_mu_);
      if (retired()) shared->Abort();
      joined_ = shared;
    }
    joined->set_value(std::move(shared));
  });
  return absl::OkStatus();
}

absl::Status PeerLinkInbox::Receive(uint64_t step_id, int64_t rows) {
  std::lock_guard<std::mutex> lock(mu_);
  if (step_id <= last_step_) return absl::OkStatus();  // a resend: its rows came with the first copy
  if (!link_.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("step ", step_id, " says its activations are on a device link, but none was opened"));
  }
  const absl::StatusOr<std::shared_ptr<PeerLink>>& link = link_->get();  // waits for the join
  if (!link.ok()) return link.status();
  auto received = (*link)->Receive(rows, hidden_size_);
  if (!received.ok()) {
    // A link that never carried a step is not tried again with this sender; one that did failed for a
    // reason of its own (the sender went away) and is.
    if (!carried_ && !retired()) failed_links_->Note(sender_, received.status());
    return received.status();
  }
  carried_ = true;
  last_step_ = step_id;
  rows_[step_id] = std::move(*received);
  return absl::OkStatus();
}

std::unique_ptr<DeviceRows> PeerLinkInbox::Take(uint64_t step_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rows_.find(step_id);
  if (it == rows_.end()) return nullptr;
  std::unique_ptr<DeviceRows> rows = std::move(it->second);
  rows_.erase(it);
  return rows;
}

void PeerLinkInbox::Retire() {
  std::shared_ptr<PeerLink> link;
  {
    std::lock_guard<std::mutex> lock(retire_mu_);
    retired_.store(true, std::memory_order_release);
    link = joined_;
  }
  if (link) link->Abort();
}

}  // namespace layerpipe
