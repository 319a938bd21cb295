#include "transport/outbox.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace layerpipe {
namespace {

// Codes after which the same RPC may succeed if tried again. Anything else is an answer.
bool Transient(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED;
}

}  // namespace

Outbox::Outbox(const OutboxOptions& options) : options_(options), thread_([this] { Loop(); }) {}

Outbox::~Outbox() { Stop(); }

void Outbox::SetEpoch(uint64_t epoch) {
  std::lock_guard<std::mutex> lock(mu_);
  epoch_ = epoch;
  cv_.notify_all();  // wakes a backoff wait so it can notice
}

void Outbox::Forward(std::shared_ptr<NextHop> next, std::shared_ptr<internal::v1::StepSink::StubInterface> sink, int stage,
                     internal::v1::StepFrame frame, std::shared_ptr<const DeviceRows> rows) {
  Item item;
  item.epoch = frame.epoch();
  item.stage = stage;
  item.next = std::move(next);
  item.sink = std::move(sink);
  item.frame = std::move(frame);
  item.rows = std::move(rows);
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return;
  queue_.push_back(std::move(item));
  cv_.notify_all();
}

void Outbox::Report(std::shared_ptr<internal::v1::StepSink::StubInterface> sink, internal::v1::StepResult result) {
  Item item;
  item.epoch = result.epoch();
  item.sink = std::move(sink);
  item.result = std::move(result);
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return;
  queue_.push_back(std::move(item));
  cv_.notify_all();
}

size_t Outbox::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size() + (busy_ ? 1 : 0);
}

void Outbox::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    queue_.clear();
    if (in_flight_ != nullptr) in_flight_->TryCancel();
    if (sending_hop_ != nullptr) sending_hop_->Cancel();
    cv_.notify_all();
  }
  std::lock_guard<std::mutex> lock(join_mu_);
  if (thread_.joinable()) thread_.join();
}

bool Outbox::Current(uint64_t epoch) {
  std::lock_guard<std::mutex> lock(mu_);
  return !stopping_ && epoch == epoch_;
}

void Outbox::Loop() {
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      if (item.epoch != epoch_) continue;
      busy_ = true;
    }
    Send(item);
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
  }
}

grpc::Status Outbox::WithRetries(uint64_t epoch, const std::function<grpc::Status(grpc::ClientContext*)>& call) {
  const absl::Time give_up = absl::Now() + options_.retry_window;
  absl::Duration backoff = absl::Milliseconds(10);
  for (int attempt = 0;; ++attempt) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return grpc::Status(grpc::StatusCode::CANCELLED, "the worker is shutting down");
      in_flight_ = &ctx;
    }
    const absl::Time start = absl::Now();
    grpc::Status st = call(&ctx);
    transfer_us_ += absl::ToInt64Microseconds(absl::Now() - start);
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_flight_ = nullptr;
    }
    // An earlier attempt that timed out may have been delivered after all.
    if (attempt > 0 && st.error_code() == grpc::StatusCode::ALREADY_EXISTS) return grpc::Status::OK;
    const absl::Time now = absl::Now();
    if (st.ok() || !Transient(st.error_code()) || now >= give_up) return st;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, absl::ToChronoNanoseconds(std::min(backoff, give_up - now)),
                 [&] { return stopping_ || epoch_ != epoch; });
    if (stopping_ || epoch_ != epoch) return st;
    backoff = std::min(backoff * 2, absl::Milliseconds(250));
  }
}

void Outbox::Send(Item& item) {
  if (item.next) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      sending_hop_ = item.next.get();
    }
    const grpc::Status st =
        WithRetries(item.epoch, [&](grpc::ClientContext* ctx) {
          return item.rows ? item.next->SendRows(ctx, item.frame, item.rows) : item.next->Send(ctx, item.frame);
        });
    {
      std::lock_guard<std::mutex> lock(mu_);
      sending_hop_ = nullptr;
    }
    if (st.ok() || !Current(item.epoch)) return;
    internal::v1::StepResult failure;
    failure.set_epoch(item.frame.epoch());
    failure.set_step_id(item.frame.step_id());
    failure.set_epoch_secret(item.frame.epoch_secret());
    failure.set_stage(item.stage + 1);
    failure.set_error_code(st.error_code());
    failure.set_error(absl::StrCat("stage ", item.stage, " could not pass step ", item.frame.step_id(),
                                   " to stage ", item.stage + 1, ": ", st.error_message()));
    item.result = std::move(failure);
  }
  if (!item.sink) {
    LP_LOG(WARNING) << "no coordinator to report step " << item.result.step_id() << " to: " << item.result.error();
    return;
  }
  internal::v1::StepAck ack;
  const grpc::Status st = WithRetries(item.epoch, [&](grpc::ClientContext* ctx) {
    return item.sink->StepDone(ctx, item.result, &ack);
  });
  if (!st.ok() && Current(item.epoch)) {
    LP_LOG(WARNING) << "could not report step " << item.result.step_id() << " to the coordinator: "
                    << st.error_message();
  }
}

}  // namespace layerpipe
