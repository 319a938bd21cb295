#include "transport/mpi/frame_link.h"

#include <climits>
#include <cstdio>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "transport/mpi/mpi_poll.h"

namespace layerpipe {
namespace {

constexpr int kFrameTag = 1;
constexpr int kCloseTag = 2;
constexpr int kVerdictTag = 3;
constexpr size_t kSeqBytes = sizeof(uint64_t);
constexpr size_t kVerdictHeader = sizeof(uint64_t) + sizeof(int32_t);

std::string EncodeVerdict(uint64_t seq, const absl::Status& st) {
  std::string out(kVerdictHeader, '\0');
  const int32_t code = static_cast<int32_t>(st.code());
  std::memcpy(out.data(), &seq, sizeof(seq));
  std::memcpy(out.data() + sizeof(seq), &code, sizeof(code));
  out.append(st.message().data(), st.message().size());
  return out;
}

// A message whose size was just probed.
std::string Receive(MPI_Message* message, const MPI_Status& status) {
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  std::string bytes(static_cast<size_t>(count), '\0');
  MPI_Mrecv(bytes.data(), count, MPI_BYTE, message, MPI_STATUS_IGNORE);
  return bytes;
}

}  // namespace

FrameLink::FrameLink(MPI_Comm world) {
  MPI_Comm_dup(world, &frames_);
  MPI_Comm_dup(world, &verdicts_);
  MPI_Comm_rank(world, &rank_);
}

FrameLink::~FrameLink() {
  if (frames_ != MPI_COMM_NULL) MPI_Comm_free(&frames_);
  if (verdicts_ != MPI_COMM_NULL) MPI_Comm_free(&verdicts_);
}

void FrameLink::ReapAbandoned() {
  for (size_t i = 0; i < abandoned_.size();) {
    int done = 0;
    MPI_Test(&abandoned_[i].request, &done, MPI_STATUS_IGNORE);
    if (done) {
      abandoned_[i] = std::move(abandoned_.back());
      abandoned_.pop_back();
    } else {
      ++i;
    }
  }
}

grpc::Status FrameLink::SendFrame(int dest, const internal::v1::StepFrame& frame, std::chrono::system_clock::time_point deadline,
                                  const std::atomic<bool>& cancelled) {
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seq = next_seq_++;
    ReapAbandoned();
  }
  auto bytes = std::make_shared<std::string>(kSeqBytes, '\0');
  std::memcpy(bytes->data(), &seq, kSeqBytes);
  if (!frame.AppendToString(bytes.get())) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "the frame could not be serialized");
  }
  if (bytes->size() > static_cast<size_t>(INT_MAX)) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("a frame of ", bytes->size(), " bytes is larger than one MPI message"));
  }
  auto stopped = [&] { return cancelled.load() || std::chrono::system_clock::now() >= deadline; };
  auto why = [&] {
    return cancelled.load() ? grpc::Status(grpc::StatusCode::CANCELLED, "the worker is shutting down")
                            : grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                           absl::StrCat("rank ", dest, " did not take the frame in time"));
  };

  MPI_Request request;
  MPI_Isend(bytes->data(), static_cast<int>(bytes->size()), MPI_BYTE, dest, kFrameTag, frames_, &request);
  if (!MpiWaitPolling(&request, stopped)) {
    std::lock_guard<std::mutex> lock(mu_);
    abandoned_.push_back({request, std::move(bytes)});
    return why();
  }
  frames_sent_++;
  for (;;) {
    int found = 0;
    MPI_Message message;
    MPI_Status status;
    MPI_Improbe(dest, kVerdictTag, verdicts_, &found, &message, &status);
    if (!found) {
      if (stopped()) return why();
      MpiPollSleep();
      continue;
    }
    const std::string verdict = Receive(&message, status);
    if (verdict.size() < kVerdictHeader) {
      return grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat("a short verdict from rank ", dest));
    }
    uint64_t got = 0;
    int32_t code = 0;
    std::memcpy(&got, verdict.data(), sizeof(got));
    std::memcpy(&code, verdict.data() + sizeof(got), sizeof(code));
    if (got != seq) continue;  // the verdict on a frame given up on earlier
    return grpc::Status(static_cast<grpc::StatusCode>(code), verdict.substr(kVerdictHeader));
  }
}

void FrameLink::ServeFrames(const Deliver& deliver, const std::vector<int>& peers) {
  std::set<int> open(peers.begin(), peers.end());
  std::vector<PendingSend> replies;
  MpiIdleBackoff backoff;
  auto reap_replies = [&] {
    for (size_t i = 0; i < replies.size();) {
      int done = 0;
      MPI_Test(&replies[i].request, &done, MPI_STATUS_IGNORE);
      if (done) {
        replies[i] = std::move(replies.back());
        replies.pop_back();
      } else {
        ++i;
      }
    }
  };
  while (!open.empty()) {
    reap_replies();
    int found = 0;
    MPI_Message message;
    MPI_Status status;
    // Any tag: a sender's frames and its close message then come in the order it sent them.
    MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, frames_, &found, &message, &status);
    if (!found) {
      backoff.Sleep();
      continue;
    }
    backoff.Reset();
    const int source = status.MPI_SOURCE;
    const std::string bytes = Receive(&message, status);
    if (status.MPI_TAG == kCloseTag) {
      open.erase(source);
      continue;
    }
    uint64_t seq = 0;
    absl::Status verdict;
    internal::v1::StepFrame frame;
    if (bytes.size() < kSeqBytes) {
      verdict = absl::InvalidArgumentError(absl::StrCat("a frame of ", bytes.size(), " bytes from rank ", source));
    } else {
      std::memcpy(&seq, bytes.data(), kSeqBytes);
      if (!frame.ParseFromArray(bytes.data() + kSeqBytes, static_cast<int>(bytes.size() - kSeqBytes))) {
        verdict = absl::InvalidArgumentError(absl::StrCat("the frame from rank ", source, " does not parse"));
      } else {
        frames_received_++;
        verdict = deliver(frame);
      }
    }
    PendingSend reply{MPI_REQUEST_NULL, std::make_shared<std::string>(EncodeVerdict(seq, verdict))};
    MPI_Isend(reply.bytes->data(), static_cast<int>(reply.bytes->size()), MPI_BYTE, source, kVerdictTag, verdicts_,
              &reply.request);
    replies.push_back(std::move(reply));
  }
  for (PendingSend& r : replies) MpiWaitPolling(&r.request);
}

void FrameLink::SendClose(const std::vector<int>& peers) {
  std::vector<MPI_Request> requests(peers.size());
  for (size_t i = 0; i < peers.size(); ++i) {
    MPI_Isend(nullptr, 0, MPI_BYTE, peers[i], kCloseTag, frames_, &requests[i]);
  }
  for (MPI_Request& r : requests) MpiWaitPolling(&r);
}

void FrameLink::Finish() {
  std::vector<PendingSend> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending = std::move(abandoned_);
    abandoned_.clear();
  }
  for (PendingSend& p : pending) MpiWaitPolling(&p.request);
  TakeStrayVerdicts();
}

void FrameLink::TakeStrayVerdicts() {
  for (;;) {
    int found = 0;
    MPI_Message message;
    MPI_Status status;
    MPI_Improbe(MPI_ANY_SOURCE, kVerdictTag, verdicts_, &found, &message, &status);
    if (!found) break;
    Receive(&message, status);
  }
}

}  // namespace layerpipe
