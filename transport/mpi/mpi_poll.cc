#include "transport/mpi/mpi_poll.h"

#include <algorithm>
#include <thread>

namespace layerpipe {
namespace {
std::atomic<int64_t> poll_us{100};
}  // namespace

void SetMpiPollInterval(std::chrono::microseconds interval) { poll_us = interval.count(); }
std::chrono::microseconds MpiPollInterval() { return std::chrono::microseconds(poll_us.load()); }
void MpiPollSleep() { std::this_thread::sleep_for(MpiPollInterval()); }

void MpiIdleBackoff::Sleep() {
  // About 30 ms of polls at the base interval before the first step back; doubling from there.
  constexpr int kPatience = 200;
  constexpr int kMaxFactor = 20;
  const std::chrono::microseconds base = MpiPollInterval();
  std::chrono::microseconds wait = base;
  if (idle_polls_ > kPatience) {
    const int doublings = std::min(idle_polls_ - kPatience, 5);
    wait = std::min(base * (1 << doublings), base * kMaxFactor);
  }
  ++idle_polls_;
  std::this_thread::sleep_for(wait);
}

bool MpiWaitPolling(MPI_Request* request, const std::function<bool()>& give_up) {
  for (;;) {
    int done = 0;
    MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (done) return true;
    if (give_up && give_up()) return false;
    MpiPollSleep();
  }
}

}  // namespace layerpipe
