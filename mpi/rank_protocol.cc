#include "mpi/rank_protocol.h"

namespace layerpipe {
namespace {
constexpr char kReady[] = "ready ";
constexpr char kFailed[] = "failed ";
constexpr char kCoordinator[] = "coordinator";
}  // namespace

std::string EncodeCoordinator() { return kCoordinator; }
std::string EncodeWorkerReady(const std::string& address) { return kReady + address; }
std::string EncodeWorkerFailed(const std::string& why) { return kFailed + why; }

StartupReport ParseStartup(const std::vector<std::string>& all) {
  StartupReport report;
  for (size_t r = 1; r < all.size(); ++r) {
    const std::string& e = all[r];
    if (e.rfind(kReady, 0) == 0) {
      report.worker_addresses.push_back(e.substr(sizeof(kReady) - 1));
    } else if (e.rfind(kFailed, 0) == 0) {
      report.failures.emplace_back(static_cast<int>(r), e.substr(sizeof(kFailed) - 1));
    } else {
      report.failures.emplace_back(static_cast<int>(r), "sent an unreadable start-up report: " + e);
    }
  }
  return report;
}

}  // namespace layerpipe
