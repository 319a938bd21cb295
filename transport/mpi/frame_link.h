// StepFrames between the worker ranks of one MPI job, with the receiver's verdict sent back.
//
// Wire: a frame is one message on a private communicator, an 8-byte sequence number followed by the
// serialized StepFrame; the verdict comes back on a second communicator as the same sequence number,
// a 4-byte status code and the status message. A sender gives up on a frame (deadline, shutdown)
// without being able to take it back, so the sequence number lets it skip verdicts of frames it no
// longer waits for. A receiver serves until every other worker rank has sent it a close message;
// MPI keeps one sender's messages in order, so by then it has taken every frame anyone sent it.
#ifndef LAYERPIPE_TRANSPORT_MPI_FRAME_LINK_H_
#define LAYERPIPE_TRANSPORT_MPI_FRAME_LINK_H_

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "proto/internal.pb.h"

namespace layerpipe {

class FrameLink {
 public:
  // Duplicates `world` (collective: every rank of it constructs a FrameLink).
  explicit FrameLink(MPI_Comm world);
  ~FrameLink();  // frees the communicators; Finish() first
  FrameLink(const FrameLink&) = delete;
  FrameLink& operator=(const FrameLink&) = delete;

  int rank() const { return rank_; }

  // Sends `frame` to rank `dest` and waits for its verdict. DEADLINE_EXCEEDED when `deadline` passes
  // first, CANCELLED when `cancelled` is set first; either way the frame may still arrive.
  grpc::Status SendFrame(int dest, const internal::v1::StepFrame& frame, std::chrono::system_clock::time_point deadline,
                         const std::atomic<bool>& cancelled);

  // Takes frames from any rank, hands each to `deliver` and sends back its verdict, until close
  // messages from all of `peers` have arrived.
  using Deliver = std::function<absl::Status(const internal::v1::StepFrame& frame)>;
  void ServeFrames(const Deliver& deliver, const std::vector<int>& peers);

  // Tells each of `peers` that this rank sends no more frames (after its outbox has stopped).
  void SendClose(const std::vector<int>& peers);

  // Takes the verdicts nobody waits for any more (of frames given up on). A receiver's ServeFrames
  // returns only once its verdicts have left, and MPI need not let a send leave before it is received
  // (Open MPI holds any message above its eager limit): so once this rank has stopped sending, it has
  // to keep calling this until every other worker rank's ServeFrames has returned, or both can wait on
  // each other at shutdown.
  void TakeStrayVerdicts();

  // Waits until frames given up on have left (their receivers serve until our close message), then
  // takes any verdict nobody waited for. Call after every rank's ServeFrames has returned.
  void Finish();

  int64_t frames_sent() const { return frames_sent_.load(); }
  int64_t frames_received() const { return frames_received_.load(); }

 private:
  struct PendingSend {
    MPI_Request request;
    std::shared_ptr<std::string> bytes;  // must outlive the send
  };
  void ReapAbandoned();  // under mu_

  MPI_Comm frames_ = MPI_COMM_NULL;
  MPI_Comm verdicts_ = MPI_COMM_NULL;
  int rank_ = 0;
  std::mutex mu_;
  uint64_t next_seq_ = 1;
  std::vector<PendingSend> abandoned_;
  std::atomic<int64_t> frames_sent_{0};
  std::atomic<int64_t> frames_received_{0};
};

}  // namespace layerpipe

#endif  // LAYERPIPE_TRANSPORT_MPI_FRAME_LINK_H_
