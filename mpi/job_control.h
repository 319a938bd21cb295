// Rank-to-rank control of a layerpipe-mpi job, on its own communicator: the start-up exchange of
// worker addresses, the stop message rank 0 sends the workers, the stop request a worker sends rank 0
// (it got a signal), and the final barrier. Every wait polls (transport/mpi/mpi_poll.h).
#ifndef LAYERPIPE_MPI_JOB_CONTROL_H_
#define LAYERPIPE_MPI_JOB_CONTROL_H_

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace layerpipe {

class JobControl {
 public:
  explicit JobControl(MPI_Comm world);  // collective
  ~JobControl();
  JobControl(const JobControl&) = delete;
  JobControl& operator=(const JobControl&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Every rank's `mine`, in rank order (collective).
  std::vector<std::string> AllGather(const std::string& mine);

  // Rank 0: tells every other rank to shut down.
  void SendStop();
  // A worker rank: true once rank 0's stop has arrived.
  bool StopArrived();

  // A worker rank: asks rank 0 to shut the job down.
  void RequestStop(const std::string& why);
  // Rank 0: a pending stop request, if any (true), with who sent it and why.
  bool TakeStopRequest(int* from, std::string* why);

  // Collective; returns once every rank has called it. `while_waiting`, when set, runs between polls
  // (for messages that others wait on this rank to receive).
  void Barrier(const std::function<void()>& while_waiting = nullptr);
  // Takes control messages nobody waits for any more (stop requests that crossed the stop).
  void DrainStray();

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 0;
  std::vector<std::shared_ptr<std::string>> sent_;  // buffers of stop requests in flight
  std::vector<MPI_Request> sent_requests_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_MPI_JOB_CONTROL_H_
