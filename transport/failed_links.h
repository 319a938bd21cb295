// Device links from a previous stage that failed before they carried a single step, by sender (its
// host and device uid). A link that cannot work where the two workers run — CUDA IPC between
// containers that do not share an IPC namespace, NCCL that cannot connect — fails again in every
// epoch; the receiver then declines that sender's later offers, so the pipeline falls back to the host
// transport after one recovery instead of failing the same way after every one.
#ifndef LAYERPIPE_TRANSPORT_FAILED_LINKS_H_
#define LAYERPIPE_TRANSPORT_FAILED_LINKS_H_

#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace layerpipe {

class FailedDeviceLinks {
 public:
  static std::string SenderKey(const std::string& host, const std::string& device_uid) {
    return host + "/" + device_uid;
  }
  // Remembers the first failure of `sender`'s links.
  void Note(const std::string& sender, const absl::Status& why);
  // Why `sender`'s links failed, when they did.
  std::optional<std::string> Failure(const std::string& sender) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::string> failures_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_TRANSPORT_FAILED_LINKS_H_
