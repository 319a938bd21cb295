// Hidden rows that stay in device memory between neighbouring GPU stages, and the point-to-point link
// (NCCL) that moves them. Backends without device memory never make either (LayerBackend defaults).
#ifndef LAYERPIPE_ENGINE_BACKEND_DEVICE_HANDOFF_H_
#define LAYERPIPE_ENGINE_BACKEND_DEVICE_HANDOFF_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace layerpipe {

// [rows, width] fp32 in one device's memory, produced asynchronously: consumers on other streams order
// themselves after the producer (an event), so holding one never blocks the host.
class DeviceRows {
 public:
  virtual ~DeviceRows() = default;
  virtual int64_t rows() const = 0;
  virtual int64_t width() const = 0;
  // Waits for the producer and copies the rows into host memory [rows, width].
  virtual absl::Status CopyToHost(float* out) const = 0;
};

// What kind of link two neighbouring stages join: between two devices (NCCL), or between two processes
// sharing one device (CUDA IPC: NCCL refuses two ranks on one GPU).
enum class PeerLinkKind { kAcrossDevices, kSameDevice };

// One direction of a two-party link between stage i (rank 0, sends) and stage i+1 (rank 1, receives).
// Sends and receives pair up in call order, so both ends must make the same sequence of calls.
class PeerLink {
 public:
  virtual ~PeerLink() = default;  // aborts the link; transfers still pending fail
  // Queues `rows` for the peer and returns; the link keeps `rows` alive until the transfer is done.
  virtual absl::Status Send(std::shared_ptr<const DeviceRows> rows) = 0;
  // Queues the receipt of the peer's next Send ([rows, width] fp32) and returns rows that become ready
  // when it lands.
  virtual absl::StatusOr<std::unique_ptr<DeviceRows>> Receive(int64_t rows, int64_t width) = 0;
  // Ends the link now, from any thread: a receive still waiting for a peer that died lets go (its rows
  // say they were lost), and every later call fails. A stage being replaced calls it so its compute
  // thread is never left waiting on a transfer that cannot come.
  virtual void Abort() = 0;
  // "nccl" or "cuda-ipc", for status and logs.
  virtual std::string transport() const = 0;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_BACKEND_DEVICE_HANDOFF_H_
