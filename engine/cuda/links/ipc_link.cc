#include "engine/cuda/links/ipc_link.h"

#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/links/peer_link_id.h"
#include "engine/cuda/device_rows.h"
#include "engine/cuda/scoped_device.h"
#include "engine/cuda/stream.h"
#include "engine/backend/layer_backend.h"

namespace layerpipe::cuda {
namespace {

// Transfers in flight at most: the sender waits for a slot only when the receiver is this far behind.
constexpr int kSlots = 4;
constexpr uint32_t kMagic = 0x4C50494Cu;  // set last by the sender: the block is filled in
// Slot buffers grow in these steps (and at least double), so a pipeline's few shapes settle quickly.
constexpr uint64_t kSlotGranule = uint64_t{1} << 20;

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the control block's atomics are shared between processes");

struct SlotControl {
  std::atomic<uint64_t> generation;  // bumped (release) after a new buffer's fields below are written
  cudaIpcMemHandle_t memory;
  uint64_t pointer;  // the buffer in the sender's process, for a receiver in the same process
  std::atomic<uint64_t> bytes;  // of the transfer now in the slot
};

// The shared-memory control block. "sent" and "consumed" only grow; a slot is reused by transfer k
// once consumed > k - kSlots, i.e. the receiver has queued the copy-out of transfer k - kSlots.
// receiver_joined: the receiver claims the link (0 -> kJoined) before it opens the sender's events; a
// sender giving up closes it (0 -> kJoinClosed) before it destroys them. One CAS each, so exactly one
// of the two happens and the sender never frees what a receiver is opening.
constexpr uint32_t kJoined = 1;
constexpr uint32_t kJoinClosed = 2;

struct Control {
  std::atomic<uint32_t> magic;
  std::atomic<uint32_t> receiver_joined;
  std::atomic<uint32_t> receiver_left;
  std::atomic<uint32_t> aborted;
  std::atomic<uint64_t> sent;      // transfers the sender has queued (release after the slot is set)
  std::atomic<uint64_t> consumed;  // transfers whose copy-out the receiver has queued
  // Who made the block: a pid alone is not enough, since two containers that share /dev/shm (one pod)
  // but not a PID namespace can both be, say, pid 7.
  int64_t sender_pid;
  uint64_t sender_token;
  cudaIpcEventHandle_t filled[kSlots];   // recorded by the sender after filling the slot
  cudaIpcEventHandle_t drained[kSlots];  // recorded by the receiver after copying it out
  uint64_t filled_local[kSlots], drained_local[kSlots];  // the same events in the sender's process
  SlotControl slots[kSlots];
};

absl::Status Errno(const std::string& what) { return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno))); }

// Polls `done` until it holds; gives up when either end aborts, *give_up turns true or `deadline` passes.
template <typename Done>
absl::Status Await(Done done, const Control* control, const std::atomic<bool>* give_up, absl::Time deadline,
                   const std::string& what) {
  for (int polls = 0;; ++polls) {
    if (done()) return absl::OkStatus();
    if (control != nullptr && control->aborted.load(std::memory_order_acquire) != 0) {
      return absl::UnavailableError(absl::StrCat(what, ": the peer link was aborted"));
    }
    if (give_up != nullptr && give_up->load(std::memory_order_acquire)) {
      return absl::CancelledError(absl::StrCat(what, ": given up (the stage was replaced)"));
    }
    if (absl::Now() > deadline) return absl::DeadlineExceededError(absl::StrCat(what, ": the peer did not come"));
    // A transfer's counterpart is normally there already: spin briefly before sleeping.
    if (polls < 64) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(absl::Microseconds(50));
    }
  }
}

absl::Time JoinDeadline() { return absl::Now() + absl::Seconds(kPeerLinkJoinTimeoutSeconds); }

// Random per process (with the pid: a forked child inherits the token but not the pid).
uint64_t ProcessToken() {
  static const uint64_t token = [] {
    std::random_device entropy;
    return (uint64_t{entropy()} << 32) ^ entropy();
  }();
  return token;
}

class IpcPeerLink final : public PeerLink {
 public:
  IpcPeerLink(int device, int rank, std::string name, Control* control, std::shared_ptr<Stream> stream)
      : device_(device), rank_(rank), name_(std::move(name)), control_(control), stream_(std::move(stream)) {}
  IpcPeerLink(const IpcPeerLink&) = delete;
  IpcPeerLink& operator=(const IpcPeerLink&) = delete;
  ~IpcPeerLink() override;

  // Sender: the control block's events (created here and exported). Receiver: opens the sender's.
  absl::Status CreateEvents();
  absl::Status OpenEvents();

  absl::Status Send(std::shared_ptr<const DeviceRows> rows) override;
  absl::StatusOr<std::unique_ptr<DeviceRows>> Receive(int64_t rows, int64_t width) override;
  void Abort() override;
  std::string transport() const override { return "cuda-ipc"; }

 private:
  bool same_process() const {
    return control_->sender_pid == static_cast<int64_t>(getpid()) && control_->sender_token == ProcessToken();
  }
  void AbortLocked();
  absl::Status Usable() const;
  // Sender: slot s can hold `bytes` (a new exported buffer when it cannot).
  absl::Status Fit(int s, uint64_t bytes);
  // Receiver: slot s's current buffer, opened in this process.
  absl::StatusOr<void*> Mapped(int s);

  const int device_;
  const int rank_;
  const std::string name_;
  Control* control_;  // mmap'd
  std::shared_ptr<Stream> stream_;
  std::mutex mu_;
  bool aborted_ = false;
  std::atomic<bool> abort_requested_{false};  // lets Abort end a wait that holds mu_
  uint64_t count_ = 0;                        // transfers sent (rank 0) or received (rank 1)
  cudaEvent_t filled_[kSlots] = {}, drained_[kSlots] = {};
  // Sender only.
  cudaEvent_t copied_[kSlots] = {};  // local: our copy into the slot is done, so its rows may go
  std::shared_ptr<const DeviceRows> held_[kSlots];
  void* buffer_[kSlots] = {};
  uint64_t capacity_[kSlots] = {};
  std::vector<void*> retired_;  // outgrown buffers: the receiver may still map them until it goes
  // Receiver only.
  void* mapped_[kSlots] = {};
  uint64_t mapped_generation_[kSlots] = {};
  std::vector<void*> opened_;  // every mapping opened through IPC, closed when the link goes
};

absl::Status IpcPeerLink::CreateEvents() {
  for (int s = 0; s < kSlots; ++s) {
    for (auto [event, handle, local] : {std::tuple{&filled_[s], &control_->filled[s], &control_->filled_local[s]},
                                        std::tuple{&drained_[s], &control_->drained[s], &control_->drained_local[s]}}) {
      LP_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(event, cudaEventDisableTiming | cudaEventInterprocess));
      LP_CUDA_RETURN_IF_ERROR(cudaIpcGetEventHandle(handle, *event));
      *local = reinterpret_cast<uint64_t>(*event);
    }
    LP_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&copied_[s], cudaEventDisableTiming));
  }
  return absl::OkStatus();
}

absl::Status IpcPeerLink::OpenEvents() {
  for (int s = 0; s < kSlots; ++s) {
    if (same_process()) {
      filled_[s] = reinterpret_cast<cudaEvent_t>(control_->filled_local[s]);
      drained_[s] = reinterpret_cast<cudaEvent_t>(control_->drained_local[s]);
      continue;
    }
    LP_CUDA_RETURN_IF_ERROR(cudaIpcOpenEventHandle(&filled_[s], control_->filled[s]));
    LP_CUDA_RETURN_IF_ERROR(cudaIpcOpenEventHandle(&drained_[s], control_->drained[s]));
  }
  return absl::OkStatus();
}

void IpcPeerLink::Abort() {
  abort_requested_.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> lock(mu_);
  AbortLocked();
}

void IpcPeerLink::AbortLocked() {
  aborted_ = true;
  control_->aborted.store(1, std::memory_order_release);
}

absl::Status IpcPeerLink::Usable() const {
  if (aborted_ || control_->aborted.load(std::memory_order_acquire) != 0) {
    return absl::UnavailableError("the peer link was aborted");
  }
  return absl::OkStatus();
}

IpcPeerLink::~IpcPeerLink() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    AbortLocked();
  }
  ScopedDevice on(device_);
  // Our queued copies end on their own (their waits are on events already recorded, or never
  // recorded); a bounded wait all the same, so a wedged device cannot hold the stage's teardown.
  const bool drained = Await([&] { return cudaStreamQuery(stream_->get()) != cudaErrorNotReady; }, nullptr, nullptr,
                             absl::Now() + absl::Seconds(10), "draining the link")
                           .ok();
  if (rank_ == 0) {
    // The receiver may still be copying out of the slots, or hold them and our events open (freeing
    // an exported buffer or event before the importer closes it is undefined): its end goes first,
    // or it never came (then it never will: the join is closed to it).
    const bool receiver_gone =
        Await([&] {
                uint32_t never = 0;
                return control_->receiver_joined.compare_exchange_strong(never, kJoinClosed,
                                                                         std::memory_order_acq_rel) ||
                       control_->receiver_left.load(std::memory_order_acquire) != 0;
              },
              nullptr, nullptr, absl::Now() + absl::Seconds(2), "the receiver leaving")
            .ok();
    // Memory a copy may still read, and events the receiver may still use, are leaked rather than
    // freed under it.
    if (drained && receiver_gone) {
      for (void* b : buffer_) {
        if (b != nullptr) cudaFree(b);
      }
      for (void* b : retired_) cudaFree(b);
    }
    for (int s = 0; s < kSlots; ++s) {
      if (copied_[s] != nullptr) cudaEventDestroy(copied_[s]);
      if (!receiver_gone) continue;
      for (cudaEvent_t e : {filled_[s], drained_[s]}) {
        if (e != nullptr) cudaEventDestroy(e);
      }
    }
    // Rows our own copies may still read go back to their pool in order on their producer's stream
    // only, which does not wait for ours.
    if (!drained) {
      for (std::shared_ptr<const DeviceRows>& h : held_) {
        if (h != nullptr) new std::shared_ptr<const DeviceRows>(std::move(h));  // leaked on purpose
      }
    }
    shm_unlink(name_.c_str());  // normally gone since the join; harmless if so
  } else {
    if (drained) {
      for (void* m : opened_) cudaIpcCloseMemHandle(m);
    }
    if (!same_process()) {
      for (int s = 0; s < kSlots; ++s) {
        for (cudaEvent_t e : {filled_[s], drained_[s]}) {
          if (e != nullptr) cudaEventDestroy(e);
        }
      }
    }
    // Only once our copies out of the slots are over and their mappings closed may the sender free
    // them; otherwise it leaks them.
    if (drained) control_->receiver_left.store(1, std::memory_order_release);
  }
  munmap(control_, sizeof(Control));
  cudaGetLastError();
}

absl::Status IpcPeerLink::Fit(int s, uint64_t bytes) {
  if (capacity_[s] >= bytes) return absl::OkStatus();
  const uint64_t capacity = std::max<uint64_t>(2 * capacity_[s], (bytes + kSlotGranule - 1) / kSlotGranule * kSlotGranule);
  void* buffer = nullptr;
  // cudaMalloc, not the stream-ordered pool: only cudaMalloc memory exports through cudaIpcGetMemHandle.
  LP_CUDA_RETURN_IF_ERROR(cudaMalloc(&buffer, capacity));
  SlotControl& slot = control_->slots[s];
  if (cudaError_t e = cudaIpcGetMemHandle(&slot.memory, buffer); e != cudaSuccess) {
    cudaFree(buffer);
    return CudaStatus(e, "cudaIpcGetMemHandle");
  }
  if (buffer_[s] != nullptr) retired_.push_back(buffer_[s]);
  buffer_[s] = buffer;
  capacity_[s] = capacity;
  slot.pointer = reinterpret_cast<uint64_t>(buffer);
  slot.generation.fetch_add(1, std::memory_order_release);
  return absl::OkStatus();
}

absl::StatusOr<void*> IpcPeerLink::Mapped(int s) {
  const SlotControl& slot = control_->slots[s];
  const uint64_t generation = slot.generation.load(std::memory_order_acquire);
  if (generation == mapped_generation_[s] && mapped_[s] != nullptr) return mapped_[s];
  void* p = nullptr;
  if (same_process()) {
    p = reinterpret_cast<void*>(slot.pointer);
  } else {
    LP_CUDA_RETURN_IF_ERROR(cudaIpcOpenMemHandle(&p, slot.memory, cudaIpcMemLazyEnablePeerAccess));
    opened_.push_back(p);  // the old mapping stays until the link goes: a queued copy may still read it
  }
  mapped_[s] = p;
  mapped_generation_[s] = generation;
  return p;
}

absl::Status IpcPeerLink::Send(std::shared_ptr<const DeviceRows> rows) {
  if (rank_ != 0) return absl::FailedPreconditionError("this end of the peer link receives (rank 1); it cannot send");
  absl::StatusOr<const CudaDeviceRows*> sendable = RowsToSend(rows.get(), device_);
  if (!sendable.ok()) return sendable.status();
  const CudaDeviceRows* r = *sendable;
  std::lock_guard<std::mutex> lock(mu_);
  LP_RETURN_IF_ERROR(Usable());
  // Empty rows travel as nothing: the receiver, asked for the same empty shape, takes nothing either.
  const uint64_t bytes = r->bytes();
  if (bytes == 0) return absl::OkStatus();
  ScopedDevice on(device_);
  LP_RETURN_IF_ERROR(on.status());
  const uint64_t k = count_;
  const int s = static_cast<int>(k % kSlots);
  LP_RETURN_IF_ERROR(Await([&] { return control_->consumed.load(std::memory_order_acquire) + kSlots > k; }, control_,
                           &abort_requested_, JoinDeadline(), "waiting for a free slot"));
  if (held_[s] != nullptr) {  // our copy out of those rows must be over before they go
    // Polled, not cudaEventSynchronize: that copy waits for the receiver's copy-out, and a host
    // blocked on a peer that died would hold mu_, so Abort (a stage being replaced) could never end.
    cudaError_t copied = cudaSuccess;
    const absl::Status waited = Await(
        [&] { return (copied = cudaEventQuery(copied_[s])) != cudaErrorNotReady; }, control_, &abort_requested_,
        JoinDeadline(), "waiting for the slot's previous copy");
    cudaGetLastError();  // "not ready" is not the next call's error
    LP_RETURN_IF_ERROR(waited);
    LP_CUDA_RETURN_IF_ERROR(copied);
    held_[s].reset();
  }
  LP_RETURN_IF_ERROR(Fit(s, bytes));
  const cudaStream_t st = stream_->get();
  // After the receiver's copy-out of this slot's previous transfer, and after the rows are written.
  LP_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(st, drained_[s], 0));
  LP_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(st, r->ready(), 0));
  LP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buffer_[s], r->data(), bytes, cudaMemcpyDeviceToDevice, st));
  LP_CUDA_RETURN_IF_ERROR(cudaEventRecord(filled_[s], st));
  LP_CUDA_RETURN_IF_ERROR(cudaEventRecord(copied_[s], st));
  held_[s] = std::move(rows);
  control_->slots[s].bytes.store(bytes, std::memory_order_relaxed);
  control_->sent.store(k + 1, std::memory_order_release);
  ++count_;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceRows>> IpcPeerLink::Receive(int64_t rows, int64_t width) {
  if (rank_ != 1) return absl::FailedPreconditionError("this end of the peer link sends (rank 0); it cannot receive");
  std::lock_guard<std::mutex> lock(mu_);
  LP_RETURN_IF_ERROR(Usable());
  ScopedDevice on(device_);
  LP_RETURN_IF_ERROR(on.status());
  absl::StatusOr<std::unique_ptr<CudaDeviceRows>> out = CudaDeviceRows::Allocate(stream_, rows, width);
  if (!out.ok()) return out.status();
  const uint64_t bytes = (*out)->bytes();
  if (bytes > 0) {
    const uint64_t k = count_;
    const int s = static_cast<int>(k % kSlots);
    // The sender queued its rows before the frame that asks for them left, so this rarely waits.
    LP_RETURN_IF_ERROR(Await([&] { return control_->sent.load(std::memory_order_acquire) > k; }, control_,
                             &abort_requested_, JoinDeadline(), "waiting for the sender's rows"));
    const uint64_t carried = control_->slots[s].bytes.load(std::memory_order_relaxed);
    if (carried != bytes) {
      AbortLocked();  // the two ends no longer agree on what is in flight
      return absl::InternalError(absl::StrCat("the link carried ", carried, " bytes where the receiver expected ",
                                              bytes, " ([", rows, ", ", width, "] fp32)"));
    }
    absl::StatusOr<void*> from = Mapped(s);
    if (!from.ok()) return from.status();
    const cudaStream_t st = stream_->get();
    LP_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(st, filled_[s], 0));
    LP_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync((*out)->data(), *from, bytes, cudaMemcpyDeviceToDevice, st));
    LP_CUDA_RETURN_IF_ERROR(cudaEventRecord(drained_[s], st));
    // Before the transfer counts as taken: a failure after that would leave the worker (which then
    // receives this step again) one transfer ahead of its frames.
    LP_RETURN_IF_ERROR((*out)->MarkReady());
    control_->consumed.store(k + 1, std::memory_order_release);
    ++count_;
  } else {
    LP_RETURN_IF_ERROR((*out)->MarkReady());
  }
  return std::unique_ptr<DeviceRows>(*std::move(out));
}

// Maps the control block of `fd`; closes fd either way.
absl::StatusOr<Control*> MapControl(int fd) {
  void* p = mmap(nullptr, sizeof(Control), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  errno = err;
  if (p == MAP_FAILED) return Errno("mmap of the peer link's control block");
  return static_cast<Control*>(p);
}

absl::StatusOr<std::unique_ptr<PeerLink>> JoinAsSender(int device, const std::string& name,
                                                       std::shared_ptr<Stream> stream,
                                                       const std::atomic<bool>* give_up) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Errno(absl::StrCat("shm_open ", name));
  if (ftruncate(fd, sizeof(Control)) != 0) {
    const absl::Status st = Errno("ftruncate of the peer link's control block");
    close(fd);
    shm_unlink(name.c_str());
    return st;
  }
  absl::StatusOr<Control*> control = MapControl(fd);
  if (!control.ok()) {
    shm_unlink(name.c_str());
    return control.status();
  }
  new (*control) Control();
  (*control)->sender_pid = getpid();
  (*control)->sender_token = ProcessToken();
  // From here the link owns the block (and unlinks the name when it goes).
  auto link = std::make_unique<IpcPeerLink>(device, 0, name, *control, std::move(stream));
  LP_RETURN_IF_ERROR(link->CreateEvents());
  (*control)->magic.store(kMagic, std::memory_order_release);
  LP_RETURN_IF_ERROR(Await([&] { return (*control)->receiver_joined.load(std::memory_order_acquire) != 0; },
                           *control, give_up, JoinDeadline(), "joining the peer link"));
  shm_unlink(name.c_str());  // both ends have it mapped: nothing is left behind if either dies
  return std::unique_ptr<PeerLink>(std::move(link));
}

absl::StatusOr<std::unique_ptr<PeerLink>> JoinAsReceiver(int device, const std::string& name,
                                                         std::shared_ptr<Stream> stream,
                                                         const std::atomic<bool>* give_up) {
  // The sender creates the block when it joins, which may be after us.
  int fd = -1;
  LP_RETURN_IF_ERROR(Await(
      [&] {
        fd = shm_open(name.c_str(), O_RDWR, 0600);
        if (fd < 0) return false;
        struct stat st{};
        if (fstat(fd, &st) == 0 && st.st_size >= static_cast<off_t>(sizeof(Control))) return true;
        close(fd);  // created but not sized yet
        fd = -1;
        return false;
      },
      nullptr, give_up, JoinDeadline(), "joining the peer link"));
  absl::StatusOr<Control*> control = MapControl(fd);
  if (!control.ok()) return control.status();
  Control* c = *control;
  if (absl::Status st = Await([&] { return c->magic.load(std::memory_order_acquire) == kMagic; }, c, give_up,
                              JoinDeadline(), "joining the peer link");
      !st.ok()) {
    munmap(c, sizeof(Control));
    return st;
  }
  // Claimed before the events are opened, so a sender that gives up meanwhile waits for us to leave
  // instead of destroying them under us (see kJoinClosed).
  uint32_t never = 0;
  if (!c->receiver_joined.compare_exchange_strong(never, kJoined, std::memory_order_acq_rel)) {
    munmap(c, sizeof(Control));
    return absl::UnavailableError("joining the peer link: the sender gave up");
  }
  // From here the link owns the mapping; a failure below aborts the link, which the sender sees.
  auto link = std::make_unique<IpcPeerLink>(device, 1, name, c, std::move(stream));
  LP_RETURN_IF_ERROR(link->OpenEvents());
  return std::unique_ptr<PeerLink>(std::move(link));
}

}  // namespace

std::string NewIpcLinkName() {
  static std::atomic<uint64_t> next{0};
  std::random_device entropy;
  return absl::StrFormat("/layerpipe-link-%d-%d-%08x", getpid(), next.fetch_add(1), entropy());
}

absl::StatusOr<std::unique_ptr<PeerLink>> JoinIpcLink(int device, const std::string& name, int rank,
                                                      const std::atomic<bool>* give_up) {
  LP_RETURN_IF_ERROR(ValidatePeerLinkRank(rank));
  if (name.size() < 2 || name[0] != '/' || name.find('/', 1) != std::string::npos || name.size() > 200) {
    return absl::InvalidArgumentError(absl::StrCat("\"", name, "\" is not a peer link name"));
  }
  absl::StatusOr<std::shared_ptr<Stream>> stream = Stream::Create(device);
  if (!stream.ok()) return stream.status();
  ScopedDevice on(device);
  LP_RETURN_IF_ERROR(on.status());
  return rank == 0 ? JoinAsSender(device, name, *std::move(stream), give_up)
                   : JoinAsReceiver(device, name, *std::move(stream), give_up);
}

}  // namespace layerpipe::cuda
