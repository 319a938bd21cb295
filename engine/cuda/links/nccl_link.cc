#include "engine/cuda/links/nccl_link.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#ifdef LAYERPIPE_HAVE_NCCL
#include <cstring>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/links/peer_link_id.h"
#include "engine/backend/layer_backend.h"
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


// Waits for a nonblocking communicator's pending work (an init, or a call that returned ncclInProgress),
// polling, so that a peer that never shows up costs a timeout or a cancellation, not a thread.
absl::Status AwaitComm(ncclComm_t comm, const std::atomic<bool>* give_up, absl::Time deadline, const char* what) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    LP_NCCL_RETURN_IF_ERROR(ncclCommGetAsyncError(comm, &state));
    if (state != ncclInProgress) return NcclStatus(state, what);
    if (give_up != nullptr && give_up->load(std::memory_order_acquire)) {
      return absl::CancelledError(absl::StrCat(what, ": given up (the stage was replaced)"));
    }
    if (absl::Now() > deadline) return absl::DeadlineExceededError(absl::StrCat(what, ": the peer did not come"));
    absl::SleepFor(absl::Microseconds(500));
  }
}

// The same for work queued on `stream`.
absl::Status AwaitStream(cudaStream_t stream, const std::atomic<bool>* give_up, absl::Time deadline,
                         const char* what) {
  for (;;) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e != cudaErrorNotReady) return CudaStatus(e, what);
    if (give_up != nullptr && give_up->load(std::memory_order_acquire)) {
      return absl::CancelledError(absl::StrCat(what, ": given up (the stage was replaced)"));
    }
    if (absl::Now() > deadline) return absl::DeadlineExceededError(absl::StrCat(what, ": the peer did not come"));
    absl::SleepFor(absl::Microseconds(500));
  }
}

// Whether this process has a context on `device` (a stage of its own there); false when unsure.
bool PrimaryContextActive(int device) {
  using GetDevice = CUresult (*)(CUdevice*, int);
  using GetState = CUresult (*)(CUdevice, unsigned int*, int*);
  static const GetDevice get_device = DriverEntryPoint<GetDevice>("cuDeviceGet");
  static const GetState get_state = DriverEntryPoint<GetState>("cuDevicePrimaryCtxGetState");
  CUdevice dev = 0;
  unsigned int flags = 0;
  int active = 0;
  return get_device != nullptr && get_state != nullptr && get_device(&dev, device) == CUDA_SUCCESS &&
         get_state(dev, &flags, &active) == CUDA_SUCCESS && active != 0;
}

// Rows come from `device`'s default pool (device_rows.h), whose memory no other device may touch
// until the pool says so; peer access (cudaDeviceEnablePeerAccess) does not cover pools. NCCL between
// two devices of one process reads or writes the peer's rows directly ("P2P/direct pointer"), which
// would fault, so every other device of this process that can reach this one gets access. Devices
// without a context here (another process's) are left alone: granting would create one on them.
absl::Status GrantPeersPoolAccess(int device) {
  int count = 0;
  LP_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  cudaMemPool_t pool = nullptr;
  LP_CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, device));
  for (int peer = 0; peer < count; ++peer) {
    if (peer == device) continue;
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, peer, device) != cudaSuccess || can == 0) continue;
    if (!PrimaryContextActive(peer)) continue;
    cudaMemLocation where{};
    where.type = cudaMemLocationTypeDevice;
    where.id = peer;
    cudaMemAccessFlags now = cudaMemAccessFlagsProtNone;
    LP_CUDA_RETURN_IF_ERROR(cudaMemPoolGetAccess(&now, pool, &where));
    if (now == cudaMemAccessFlagsProtReadWrite) continue;
    cudaMemAccessDesc desc{};
    desc.location = where;
    desc.flags = cudaMemAccessFlagsProtReadWrite;
    LP_CUDA_RETURN_IF_ERROR(cudaMemPoolSetAccess(pool, &desc, 1));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> NewNcclLinkId() {
  ncclUniqueId id;
  LP_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<std::unique_ptr<PeerLink>> JoinNcclLink(int device, const std::string& id, int rank,
                                                       const std::atomic<bool>* give_up) {
  ncclUniqueId uid;
  if (id.size() != sizeof(uid.internal)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a peer link id is ", sizeof(uid.internal), " bytes (an NCCL unique id), not ", id.size()));
  }
  LP_RETURN_IF_ERROR(ValidatePeerLinkRank(rank));
  std::memcpy(uid.internal, id.data(), id.size());
  absl::StatusOr<std::shared_ptr<Stream>> stream = Stream::Create(device);
  if (!stream.ok()) return stream.status();
  // NCCL binds the communicator to the current device.
  ScopedDevice on(device);
  LP_RETURN_IF_ERROR(on.status());
  const absl::Time deadline = absl::Now() + absl::Seconds(kPeerLinkJoinTimeoutSeconds);
  // Nonblocking, so the join can be abandoned (AwaitComm) and the communicator aborted.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, 2, uid, rank, &config);
  absl::Status joined = r == ncclSuccess || r == ncclInProgress ? AwaitComm(comm, give_up, deadline, "joining the peer link")
                                                                : NcclStatus(r, "ncclCommInitRankConfig");
  // NCCL connects a pair of peers lazily, inside their first send/receive, and that call blocks the
  // host until the peer makes its own. The worker sends a step's rows before the frame that makes the
  // receiver post its receive, so that first transfer must not be a step's: one value goes across here,
  // while both ends are joining anyway.
  // The probe comes from the pool on the link stream: cudaFree would wait for the whole device, where
  // the stage's other link may hold a transfer that waits for its own peer.
  float* probe = nullptr;
  if (joined.ok()) joined = GrantPeersPoolAccess(device);
  if (joined.ok()) {
    joined = CudaStatus(cudaMallocAsync(reinterpret_cast<void**>(&probe), sizeof(float), (*stream)->get()),
                        "cudaMallocAsync");
  }
  if (joined.ok()) {
    const ncclResult_t w = rank == 0 ? ncclSend(probe, 1, ncclFloat32, 1, comm, (*stream)->get())
                                     : ncclRecv(probe, 1, ncclFloat32, 0, comm, (*stream)->get());
    joined = w == ncclSuccess || w == ncclInProgress
                 ? AwaitComm(comm, give_up, deadline, "the link's first transfer")
                 : NcclStatus(w, "the link's first transfer");
    if (joined.ok()) joined = AwaitStream((*stream)->get(), give_up, deadline, "the link's first transfer");
  }
  if (!joined.ok()) {
    if (comm != nullptr) ncclCommAbort(comm);
    // Freed in order behind the aborted transfer; nothing here waits for it to end.
    if (probe != nullptr) cudaFreeAsync(probe, (*stream)->get());
    cudaGetLastError();
    return joined;
  }
  cudaFreeAsync(probe, (*stream)->get());
  return std::unique_ptr<PeerLink>(new NcclPeerLink(device, rank, comm, *std::move(stream)));
}

void NcclPeerLink::Abort() {
  abort_requested_.store(true, std::memory_order_release);  // see abort_requested_
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
    // An untracked transfer (its event could not be recorded, or not yet: see FinishEnqueue) is kept
    // until it is tracked or the link goes; an event never recorded would read as complete.
    if (p.done == nullptr || !p.recorded || cudaEventQuery(p.done) != cudaSuccess) break;
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
  p.recorded = e == cudaSuccess;
  pending_.push_back(std::move(p));
  return CudaStatus(e, "cudaEventRecord after a peer transfer");
}

absl::Status NcclPeerLink::FinishEnqueue() {
  if (!enqueue_in_progress_) return absl::OkStatus();
  const absl::Status st = AwaitComm(comm_, &abort_requested_, absl::Now() + absl::Seconds(kPeerLinkJoinTimeoutSeconds),
                                    "an earlier ncclSend");
  if (!st.ok()) {
    AbortLocked();  // the communicator's state is unknown; the rows stay with the link until it goes
    return st;
  }
  enqueue_in_progress_ = false;
  for (Pending& p : pending_) {
    if (p.done != nullptr && !p.recorded) p.recorded = cudaEventRecord(p.done, stream_->get()) == cudaSuccess;
  }
  return absl::OkStatus();
}

absl::Status NcclPeerLink::Send(std::shared_ptr<const DeviceRows> rows) {
  if (rank_ != 0) return absl::FailedPreconditionError("this end of the peer link receives (rank 1); it cannot send");
  absl::StatusOr<const CudaDeviceRows*> sendable = RowsToSend(rows.get(), device_);
  if (!sendable.ok()) return sendable.status();
  const CudaDeviceRows* r = *sendable;
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) return absl::UnavailableError("the peer link was aborted");
  ScopedDevice on(device_);
  LP_RETURN_IF_ERROR(on.status());
  LP_RETURN_IF_ERROR(FinishEnqueue());
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
    // The communicator is nonblocking (JoinNcclLink): NCCL may still be finishing the enqueue, e.g.
    // connecting to the peer, which needs the peer's matching receive, and the peer posts that only
    // when the frame this send precedes reaches it. So no waiting here: the next call finishes it.
    if (sent == ncclInProgress) {
      enqueue_in_progress_ = true;
      p.sent = std::move(rows);
      pending_.push_back(std::move(p));  // its event is recorded by FinishEnqueue
      return absl::OkStatus();
    }
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
  absl::Status queued = NcclStatus(got == ncclInProgress ? ncclSuccess : got, "ncclRecv");
  // Unlike a send, a receive may wait for its enqueue to finish: the worker posts it when the frame
  // arrives, after the peer's matching send was already called.
  if (queued.ok() && got == ncclInProgress) {
    queued = AwaitComm(comm_, &abort_requested_, absl::Now() + absl::Seconds(kPeerLinkJoinTimeoutSeconds),
                       "ncclRecv");
    // See Send: end the link before the rows' free goes on the stream, so no receive into them can be
    // enqueued after it.
    if (!queued.ok()) AbortLocked();
  }
  if (!queued.ok()) {
    cudaEventDestroy(p.done);
    return queued;
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

absl::StatusOr<std::unique_ptr<PeerLink>> JoinNcclLink(int /*device*/, const std::string& /*id*/, int /*rank*/,
                                                       const std::atomic<bool>* /*give_up*/) {
  return absl::UnimplementedError("this CUDA plugin was built without NCCL, so it has no peer links");
}

#endif  // LAYERPIPE_HAVE_NCCL

}  // namespace layerpipe::cuda
