#include "mpi/rank_protocol.h"

#include <map>

#include "absl/strings/str_cat.h"

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
  // Ranks that advertise the same address (one --worker-advertise-host for ranks on several hosts,
  // with a fixed --worker-listen port) cannot be told apart: the coordinator would assign both stages
  // to one of them, and frames for the next stage would go to whichever rank the address maps to.
  std::map<std::string, int> first_rank_of;
  for (size_t r = 1; r < all.size(); ++r) {
    const std::string& e = all[r];
    if (e.rfind(kReady, 0) == 0) {
      const std::string address = e.substr(sizeof(kReady) - 1);
      const auto [it, fresh] = first_rank_of.emplace(address, static_cast<int>(r));
      if (!fresh) {
        report.failures.emplace_back(static_cast<int>(r),
                                     absl::StrCat("it advertises ", address, ", as rank ", it->second,
                                                  " does (set --worker-advertise-host per host, or leave it "
                                                  "empty)"));
      }
      report.worker_addresses.push_back(address);
    } else if (e.rfind(kFailed, 0) == 0) {
      report.failures.emplace_back(static_cast<int>(r), e.substr(sizeof(kFailed) - 1));
    } else {
      report.failures.emplace_back(static_cast<int>(r), "sent an unreadable start-up report: " + e);
    }
  }
  return report;
}

}  // namespace layerpipe
