#include "engine/cuda/nccl_link.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#ifdef LAYERPIPE_HAVE_NCCL
#include <cstring>
#include <utility>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/scoped_device.h"
#endif

namespace layerpipe::cuda {

#ifdef LAYERPIPE_HAVE_NCCL

namespace {

// NCCL's name for the code plus its last message, which names the peer or transport that failed.
absl::Status NcclStatus(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return absl::OkStatus();
  const absl::StatusCode code = r == ncclRemoteError || r == ncclSystemError ? absl::StatusCode::kUnavailable
                                                                               : absl::StatusCode::kInternal;
  const char* last = ncclGetLastError(nullptr);
  return absl::Status(code, absl::StrCat(what, ": ", ncclGetErrorString(r),
                                         last != nullptr && *last != '\0' ? absl::StrCat(" (", last, ")") : ""));
}

#define LP_NCCL_RETURN_IF_ERROR(expr)                                                \
  do {                                                                               \
    if (absl::Status _lp_st = NcclStatus((expr), #expr); !_lp_st.ok()) return _lp_st; \
  } while (0)

}  // namespace

absl::StatusOr<std::string> NewNcclLinkId() {
  ncclUniqueId id;
  LP_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<std::unique_ptr<PeerLink>> JoinNcclLink(int device, const std::string& id, int rank) {
  ncclUniqueId uid;
  if (id.size() != sizeof(uid.internal)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a peer link id is ", sizeof(uid.internal), " bytes (an NCCL unique id), not ", id.size()));
  }
  if (rank != 0 && rank != 1) {
    return absl::InvalidArgumentError(absl::StrCat("peer link rank ", rank, ": 0 sends, 1 receives"));
  }
  std::memcpy(uid.internal, id.data(), id.size());
  absl::StatusOr<std::shared_ptr<Stream>> stream = Stream::Create(device);
  if (!stream.ok()) return stream.status();
  // NCCL binds the communicator to the current device.
  ScopedDevice on(device);
  LP_RETURN_IF_ERROR(on.status());
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRank(&comm, 2, uid, rank);
  if (r != ncclSuccess) {
    absl::Status st = NcclStatus(r, "ncclCommInitRank");
    if (comm != nullptr) ncclCommAbort(comm);
    return st;
  }
  // NCCL connects a pair of peers lazily, inside their first send/receive, and that call blocks the
  // host until the peer makes its own. The worker sends a step's rows before the frame that makes the
  // receiver post its receive, so that first transfer must not be a step's: one value goes across here,
  // while both ends are joining anyway.
  float* probe = nullptr;
  absl::Status warm = CudaStatus(cudaMalloc(&probe, sizeof(float)), "cudaMalloc");
  if (warm.ok()) {
    const ncclResult_t w = rank == 0 ? ncclSend(probe, 1, ncclFloat32, 1, comm, (*stream)->get())
                                     : ncclRecv(probe, 1, ncclFloat32, 0, comm, (*stream)->get());
    warm = w == ncclSuccess ? CudaStatus(cudaStreamSynchronize((*stream)->get()), "cudaStreamSynchronize")
                            : NcclStatus(w, "the link's first transfer");
    cudaFree(probe);
  }
  if (!warm.ok()) {
    ncclCommAbort(comm);
    return warm;
  }
  return std::unique_ptr<PeerLink>(new NcclPeerLink(device, rank, comm, *std::move(stream)));
}

void NcclPeerLink::Abort() {
  std::lock_guard<std::mutex> lock(mu_);
  AbortLocked();
}

void NcclPeerLink::AbortLocked() {
  if (aborted_) return;
  aborted_ = true;
  ScopedDevice on(device_);
  // A receive still pending when the link goes never lands: its ready event fires once the abort
  // ends the transfer, so its rows must say they hold nothing.
  for (const Pending& p : pending_) {
    if (p.lost != nullptr && (p.done == nullptr || cudaEventQuery(p.done) != cudaSuccess)) {
      p.lost->store(true, std::memory_order_release);
    }
  }
  ncclCommAbort(comm_);
  cudaGetLastError();  // whatever the abort left behind is not the next caller's error
}

NcclPeerLink::~NcclPeerLink() {
  std::lock_guard<std::mutex> lock(mu_);
  AbortLocked();
  ScopedDevice on(device_);
  // The aborted transfers have returned once the stream drains; only then may the sent rows go.
  cudaStreamSynchronize(stream_->get());
  for (const Pending& p : pending_) {
    if (p.done != nullptr) cudaEventDestroy(p.done);
  }
  pending_.clear();
  cudaGetLastError();
}

absl::Status NcclPeerLink::Healthy() {
  ncclResult_t async = ncclSuccess;
  LP_NCCL_RETURN_IF_ERROR(ncclCommGetAsyncError(comm_, &async));
  if (async != ncclSuccess && async != ncclInProgress) return NcclStatus(async, "peer link");
  return absl::OkStatus();
}

void NcclPeerLink::Reap() {
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    // An untracked transfer (its event could not be recorded) is kept until the link goes.
    if (p.done == nullptr || cudaEventQuery(p.done) != cudaSuccess) break;
    cudaEventDestroy(p.done);
    pending_.pop_front();
  }
  cudaGetLastError();  // a query that said "not ready" is not an error for the next call
}

absl::Status NcclPeerLink::Track(Pending p) {
  const cudaError_t e = cudaEventRecord(p.done, stream_->get());
  if (e != cudaSuccess) {
    cudaEventDestroy(p.done);
    p.done = nullptr;
  }
  pending_.push_back(std::move(p));
  return CudaStatus(e, "cudaEventRecord after a peer transfer");
}

absl::Status NcclPeerLink::Send(std::shared_ptr<const DeviceRows> rows) {
  if (rank_ != 0) return absl::FailedPreconditionError("this end of the peer link receives (rank 1); it cannot send");
  const auto* r = dynamic_cast<const CudaDeviceRows*>(rows.get());
  if (r == nullptr) return absl::InvalidArgumentError("a peer link sends only device rows made by the CUDA plugin");
  if (r->device() != device_) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows on cuda:", r->device(), " cannot be sent by a peer link on cuda:", device_));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) return absl::UnavailableError("the peer link was aborted");
  ScopedDevice on(device_);
  LP_RETURN_IF_ERROR(on.status());
  Reap();
  LP_RETURN_IF_ERROR(Healthy());
  // Empty rows travel as nothing: the receiver, asked for the same empty shape, queues nothing either.
  if (r->bytes() == 0) return absl::OkStatus();
  Pending p;
  LP_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&p.done, cudaEventDisableTiming));
  cudaError_t waited = cudaStreamWaitEvent(stream_->get(), r->ready(), 0);
  ncclResult_t sent = ncclSuccess;
  if (waited == cudaSuccess) {
    sent = ncclSend(r->data(), static_cast<size_t>(r->rows() * r->width()), ncclFloat32, 1, comm_, stream_->get());
  }
  if (waited != cudaSuccess || sent != ncclSuccess) {
    cudaEventDestroy(p.done);
    if (waited != cudaSuccess) return CudaStatus(waited, "cudaStreamWaitEvent before ncclSend");
    return NcclStatus(sent, "ncclSend");
  }
  p.sent = std::move(rows);
  return Track(std::move(p));
}

absl::StatusOr<std::unique_ptr<DeviceRows>> NcclPeerLink::Receive(int64_t rows, int64_t width) {
  if (rank_ != 1) return absl::FailedPreconditionError("this end of the peer link sends (rank 0); it cannot receive");
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) return absl::UnavailableError("the peer link was aborted");
  ScopedDevice on(device_);
  LP_RETURN_IF_ERROR(on.status());
  Reap();
  LP_RETURN_IF_ERROR(Healthy());
  Pending p;
  p.lost = std::make_shared<std::atomic<bool>>(false);
  absl::StatusOr<std::unique_ptr<CudaDeviceRows>> out = CudaDeviceRows::Allocate(stream_, rows, width, p.lost);
  if (!out.ok()) return out.status();
  if ((*out)->bytes() == 0) {  // see Send
    LP_RETURN_IF_ERROR((*out)->MarkReady());
    return std::unique_ptr<DeviceRows>(*std::move(out));
  }
  LP_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&p.done, cudaEventDisableTiming));
  const ncclResult_t got = ncclRecv((*out)->data(), static_cast<size_t>(rows * width), ncclFloat32, 0, comm_,
                                    stream_->get());
  if (got != ncclSuccess) {
    cudaEventDestroy(p.done);
    return NcclStatus(got, "ncclRecv");
  }
  // Rows dropped on an error below are freed in order on this stream, after the receive.
  LP_RETURN_IF_ERROR((*out)->MarkReady());
  LP_RETURN_IF_ERROR(Track(std::move(p)));
  return std::unique_ptr<DeviceRows>(*std::move(out));
}

#else  // !LAYERPIPE_HAVE_NCCL

absl::StatusOr<std::string> NewNcclLinkId() {
  return absl::UnimplementedError("this CUDA plugin was built without NCCL, so it has no peer links");
}

absl::StatusOr<std::unique_ptr<PeerLink>> JoinNcclLink(int /*device*/, const std::string& /*id*/, int /*rank*/) {
  return absl::UnimplementedError("this CUDA plugin was built without NCCL, so it has no peer links");
}

#endif  // LAYERPIPE_HAVE_NCCL

}  // namespace layerpipe::cuda
