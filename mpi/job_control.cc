#include "mpi/job_control.h"

#include "transport/mpi/mpi_poll.h"

namespace layerpipe {
namespace {
constexpr int kStopTag = 1;
constexpr int kStopRequestTag = 2;
}  // namespace

JobControl::JobControl(MPI_Comm world) {
  MPI_Comm_dup(world, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

JobControl::~JobControl() {
  for (MPI_Request& r : sent_requests_) MpiWaitPolling(&r);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::vector<std::string> JobControl::AllGather(const std::string& mine) {
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(size_);
  MPI_Request request;
  MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_, &request);
  MpiWaitPolling(&request);
  std::vector<int> offsets(size_);
  int total = 0;
  for (int r = 0; r < size_; ++r) {
    offsets[r] = total;
    total += lengths[r];
  }
  std::string all(static_cast<size_t>(total), '\0');
  MPI_Iallgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, comm_,
                  &request);
  MpiWaitPolling(&request);
  std::vector<std::string> out(size_);
  for (int r = 0; r < size_; ++r) out[r] = all.substr(offsets[r], lengths[r]);
  return out;
}

void JobControl::SendStop() {
  std::vector<MPI_Request> requests;
  for (int r = 1; r < size_; ++r) {
    requests.emplace_back();
    MPI_Isend(nullptr, 0, MPI_BYTE, r, kStopTag, comm_, &requests.back());
  }
  for (MPI_Request& r : requests) MpiWaitPolling(&r);
}

bool JobControl::StopArrived() {
  int found = 0;
  MPI_Status status;
  MPI_Iprobe(0, kStopTag, comm_, &found, &status);
  if (!found) return false;
  MPI_Recv(nullptr, 0, MPI_BYTE, 0, kStopTag, comm_, MPI_STATUS_IGNORE);
  return true;
}

void JobControl::RequestStop(const std::string& why) {
  auto bytes = std::make_shared<std::string>(why);
  sent_requests_.emplace_back();
  MPI_Isend(bytes->data(), static_cast<int>(bytes->size()), MPI_CHAR, 0, kStopRequestTag, comm_,
            &sent_requests_.back());
  sent_.push_back(std::move(bytes));
}

bool JobControl::TakeStopRequest(int* from, std::string* why) {
  int found = 0;
  MPI_Message message;
  MPI_Status status;
  MPI_Improbe(MPI_ANY_SOURCE, kStopRequestTag, comm_, &found, &message, &status);
  if (!found) return false;
  int count = 0;
  MPI_Get_count(&status, MPI_CHAR, &count);
  why->assign(static_cast<size_t>(count), '\0');
  MPI_Mrecv(why->data(), count, MPI_CHAR, &message, MPI_STATUS_IGNORE);
  *from = status.MPI_SOURCE;
  return true;
}

void JobControl::Barrier(const std::function<void()>& while_waiting) {
  MPI_Request request;
  MPI_Ibarrier(comm_, &request);
  MpiWaitPolling(&request, [&] {
    if (while_waiting) while_waiting();
    return false;
  });
}

void JobControl::DrainStray() {
  int from = 0;
  std::string why;
  while (TakeStopRequest(&from, &why)) {
  }
}

}  // namespace layerpipe
