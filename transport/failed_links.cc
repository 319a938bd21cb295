#include "transport/failed_links.h"

namespace layerpipe {

void FailedDeviceLinks::Note(const std::string& sender, const absl::Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  failures_.emplace(sender, std::string(why.message()));
}

std::optional<std::string> FailedDeviceLinks::Failure(const std::string& sender) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = failures_.find(sender);
  if (it == failures_.end()) return std::nullopt;
  return it->second;
}

}  // namespace layerpipe
