// Waiting on MPI without spinning. Open MPI's blocking calls (MPI_Wait, MPI_Recv, MPI_Barrier) poll
// the network at full speed, which on a small machine takes a core from the compute threads; every
// wait here tests and then sleeps a little instead.
#ifndef LAYERPIPE_TRANSPORT_MPI_MPI_POLL_H_
#define LAYERPIPE_TRANSPORT_MPI_MPI_POLL_H_

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <functional>

namespace layerpipe {

// Sleep between polls; set once at start (layerpipe-mpi --mpi-poll-us).
void SetMpiPollInterval(std::chrono::microseconds interval);
std::chrono::microseconds MpiPollInterval();
void MpiPollSleep();

// For a loop that waits a long time between messages (a rank's frame receiver): polls every
// MpiPollInterval() while messages keep coming, then, once nothing has come for a while, backs off to
// 20 times that, so an idle rank costs next to nothing and a busy one adds little latency.
class MpiIdleBackoff {
 public:
  void Reset() { idle_polls_ = 0; }
  void Sleep();

 private:
  int idle_polls_ = 0;
};

// Tests `request` until it completes (true), or `give_up` says to stop waiting (false; the request is
// still active and belongs to the caller).
bool MpiWaitPolling(MPI_Request* request, const std::function<bool()>& give_up = nullptr);

}  // namespace layerpipe

#endif  // LAYERPIPE_TRANSPORT_MPI_MPI_POLL_H_
