// What a stage sends: frames to the next stage and results to the coordinator, in the order the
// compute thread produced them, from a thread of their own so sending never delays the next step.
#ifndef LAYERPIPE_TRANSPORT_OUTBOX_H_
#define LAYERPIPE_TRANSPORT_OUTBOX_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/internal.grpc.pb.h"
#include "transport/next_hop.h"

namespace layerpipe {

struct OutboxOptions {
  // How long a send that fails with a transient error (unreachable, deadline) is retried, with
  // backoff, before it is given up.
  absl::Duration retry_window = absl::Seconds(2);
  // Deadline of each RPC.
  absl::Duration rpc_timeout = absl::Seconds(30);
};

class Outbox {
 public:
  explicit Outbox(const OutboxOptions& options);
  ~Outbox();  // Stop()
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  // Items of other epochs still queued are dropped instead of sent: nobody wants them any more.
  void SetEpoch(uint64_t epoch);

  // Sends `frame` to the next stage. If it cannot be delivered, the coordinator gets a StepResult
  // with the error, blamed on stage `stage` + 1 (the one that did not take it). `rows`, when set, are
  // the frame's activations still in device memory (NextHop::SendRows).
  void Forward(std::shared_ptr<NextHop> next, std::shared_ptr<internal::v1::StepSink::StubInterface> sink, int stage,
               internal::v1::StepFrame frame, std::shared_ptr<const DeviceRows> rows = nullptr);
  // Sends a result (or a step's error) to the coordinator.
  void Report(std::shared_ptr<internal::v1::StepSink::StubInterface> sink, internal::v1::StepResult result);

  // Time spent in sends, successful or not.
  double transfer_ms_total() const { return transfer_us_.load() / 1000.0; }
  // Items not yet sent.
  size_t pending() const;

  // Ends the thread; unsent items are dropped and an RPC in flight is cancelled.
  void Stop();

 private:
  struct Item {
    uint64_t epoch = 0;
    int stage = 0;
    std::shared_ptr<NextHop> next;  // set: a frame to forward
    std::shared_ptr<internal::v1::StepSink::StubInterface> sink;
    internal::v1::StepFrame frame;
    std::shared_ptr<const DeviceRows> rows;  // the frame's activations, when still on the device
    internal::v1::StepResult result;
  };

  void Loop();
  void Send(Item& item);
  // Runs `call` until it succeeds, fails for good, the retry window closes, the epoch moves on or
  // the outbox stops.
  grpc::Status WithRetries(uint64_t epoch, const std::function<grpc::Status(grpc::ClientContext*)>& call);
  bool Current(uint64_t epoch);

  const OutboxOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  uint64_t epoch_ = 0;
  bool stopping_ = false;
  bool busy_ = false;
  grpc::ClientContext* in_flight_ = nullptr;  // guarded by mu_; cancelled by Stop()
  NextHop* sending_hop_ = nullptr;            // guarded by mu_; cancelled by Stop()
  std::atomic<int64_t> transfer_us_{0};
  std::mutex join_mu_;  // Stop() may be called from several threads
  std::thread thread_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_TRANSPORT_OUTBOX_H_
