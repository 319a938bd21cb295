// The NCCL calls the backend's peer links make, for two ranks, on the host: the unique id names an
// abstract Unix socket, rank 0 listens on it and rank 1 connects, in the background, as a nonblocking
// communicator's init does; ncclSend / ncclRecv are stream work that writes / reads the rows through the
// socket, so a send waits for its receiver exactly as NCCL's does, within one process (two emulated
// devices) or between two (two workers). ncclCommAbort shuts the socket, which ends transfers in flight.
// A receive whose size differs from the matching send is an error of the communicator
// (ncclInvalidUsage), where NCCL would hang or corrupt memory.
#include <nccl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "tools/cuda_emu/runtime_internal.h"

namespace {

// One end of a two-rank communicator; stream work holds it past ncclCommAbort, and the socket is closed
// only when the last of that work is done with it.
struct Link {
  int rank = 0;
  std::string name;  // the abstract socket's name
  std::atomic<int> state{ncclInProgress};
  std::atomic<bool> aborted{false};
  std::atomic<int> fd{-1};
  std::mutex mu;
  std::string error;

  ~Link() {
    if (fd.load() >= 0) close(fd.load());
  }

  void Connected(int s) {
    fd.store(s);
    int expected = ncclInProgress;
    state.compare_exchange_strong(expected, ncclSuccess);
  }
  void Fail(ncclResult_t r, const std::string& why);
};

std::mutex g_error_mu;
std::string g_last_error;

// The communicator's asynchronous error; the first one stays. ncclGetLastError(nullptr) tells it too.
void Link::Fail(ncclResult_t r, const std::string& why) {
  {
    std::lock_guard<std::mutex> l(mu);
    if (error.empty()) error = why;
  }
  {
    std::lock_guard<std::mutex> l(g_error_mu);
    g_last_error = why;
  }
  int current = state.load();
  while ((current == ncclSuccess || current == ncclInProgress) && !state.compare_exchange_weak(current, r)) {
  }
}

ncclResult_t Refuse(ncclResult_t r, const std::string& why) {
  std::fprintf(stderr, "CUDA emulator (NCCL): %s\n", why.c_str());
  std::lock_guard<std::mutex> l(g_error_mu);
  g_last_error = why;
  return r;
}

sockaddr_un AddressOf(const std::string& name, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  a.sun_path[0] = '\0';  // abstract: nothing on disk to clean up
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

// Connects the two ranks, polling so that an abort ends the wait.
void Connect(std::shared_ptr<Link> link) {
  // LPEMU_FAIL=nccl-connect: two ranks that cannot reach each other (a firewall, no common network).
  if (const char* fail = std::getenv("LPEMU_FAIL"); fail != nullptr && std::strstr(fail, "nccl-connect") != nullptr) {
    link->Fail(ncclSystemError, "connecting to the peer: fault injected (LPEMU_FAIL=nccl-connect)");
    return;
  }
  socklen_t len;
  const sockaddr_un addr = AddressOf(link->name, &len);
  if (link->rank == 0) {
    const int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener < 0 || bind(listener, reinterpret_cast<const sockaddr*>(&addr), len) != 0 || listen(listener, 1) != 0) {
      link->Fail(ncclSystemError, std::string("listening for the peer: ") + std::strerror(errno));
      if (listener >= 0) close(listener);
      return;
    }
    while (!link->aborted.load()) {
      pollfd p{listener, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      const int conn = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) continue;
      link->Connected(conn);
      break;
    }
    close(listener);
    return;
  }
  while (!link->aborted.load()) {
    const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s >= 0 && connect(s, reinterpret_cast<const sockaddr*>(&addr), len) == 0) {
      link->Connected(s);
      return;
    }
    if (s >= 0) close(s);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

bool WriteAll(int fd, const void* p, size_t n) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      return false;
    }
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = recv(fd, c, n, 0);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      return false;
    }
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

size_t TypeBytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

// The stream work of a send or receive: waits for the connection, then moves the bytes.
void Transfer(const std::shared_ptr<Link>& link, void* p, uint64_t bytes, bool send) {
  while (link->state.load() == ncclInProgress && !link->aborted.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (link->aborted.load() || link->state.load() != ncclSuccess) return;
  const int fd = link->fd.load();
  if (send) {
    if (!WriteAll(fd, &bytes, sizeof(bytes)) || !WriteAll(fd, p, bytes)) {
      if (!link->aborted.load()) link->Fail(ncclRemoteError, "the peer went away during a send");
    }
    return;
  }
  uint64_t coming = 0;
  if (!ReadAll(fd, &coming, sizeof(coming))) {
    if (!link->aborted.load()) link->Fail(ncclRemoteError, "the peer went away during a receive");
    return;
  }
  if (coming != bytes) {
    link->Fail(ncclInvalidUsage, "a receive of " + std::to_string(bytes) + " bytes met a send of " +
                                     std::to_string(coming));
    return;
  }
  if (!ReadAll(fd, p, bytes) && !link->aborted.load()) link->Fail(ncclRemoteError, "the peer went away during a receive");
}

}  // namespace

struct ncclComm {
  std::shared_ptr<Link> link;
};

extern "C" {

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  thread_local std::string copy;
  if (comm != nullptr) {
    std::lock_guard<std::mutex> l(comm->link->mu);
    copy = comm->link->error;
  } else {
    std::lock_guard<std::mutex> l(g_error_mu);
    copy = g_last_error;
  }
  return copy.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static std::atomic<int> next{0};
  std::random_device entropy;
  std::memset(id->internal, 0, sizeof(id->internal));
  std::snprintf(id->internal, sizeof(id->internal), "lpemu-nccl-%d-%d-%08x", static_cast<int>(getpid()),
                next.fetch_add(1), entropy());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  if (nranks != 2) return Refuse(ncclInvalidUsage, "the emulator's communicators have two ranks");
  if (rank < 0 || rank >= nranks) return Refuse(ncclInvalidArgument, "rank out of range");
  const size_t len = strnlen(id.internal, sizeof(id.internal));
  if (len == 0 || len >= sizeof(id.internal) || std::strncmp(id.internal, "lpemu-nccl-", 11) != 0) {
    return Refuse(ncclInvalidArgument, "a unique id ncclGetUniqueId did not make");
  }
  auto link = std::make_shared<Link>();
  link->rank = rank;
  link->name.assign(id.internal, len);
  *comm = new ncclComm{link};
  std::thread(Connect, link).detach();
  const bool blocking = config == nullptr || config->blocking != 0;
  if (!blocking) return ncclInProgress;
  while (link->state.load() == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return static_cast<ncclResult_t>(link->state.load());
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (comm == nullptr) return Refuse(ncclInvalidArgument, "no communicator");
  *state = static_cast<ncclResult_t>(comm->link->state.load());
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  comm->link->aborted.store(true);
  // Wakes transfers blocked on the socket; the descriptor is closed with the last of them (~Link).
  if (const int fd = comm->link->fd.load(); fd >= 0) shutdown(fd, SHUT_RDWR);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  const size_t bytes = count * TypeBytes(type);
  if (comm == nullptr || TypeBytes(type) == 0) return Refuse(ncclInvalidArgument, "ncclSend: bad communicator or type");
  if (peer != 1 - comm->link->rank) return Refuse(ncclInvalidArgument, "ncclSend: the peer is not the other rank");
  if (bytes > 0 && !lpemu::InsideDeviceAllocation(buf, bytes)) {
    return Refuse(ncclInvalidArgument, "ncclSend: the buffer is not device memory of that size");
  }
  std::shared_ptr<Link> link = comm->link;
  lpemu::Enqueue(lpemu::StreamOf(stream),
                 [link, buf, bytes] { Transfer(link, const_cast<void*>(buf), bytes, /*send=*/true); });
  return ncclSuccess;
}

ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream) {
  const size_t bytes = count * TypeBytes(type);
  if (comm == nullptr || TypeBytes(type) == 0) return Refuse(ncclInvalidArgument, "ncclRecv: bad communicator or type");
  if (peer != 1 - comm->link->rank) return Refuse(ncclInvalidArgument, "ncclRecv: the peer is not the other rank");
  if (bytes > 0 && !lpemu::InsideDeviceAllocation(buf, bytes)) {
    return Refuse(ncclInvalidArgument, "ncclRecv: the buffer is not device memory of that size");
  }
  std::shared_ptr<Link> link = comm->link;
  lpemu::Enqueue(lpemu::StreamOf(stream), [link, buf, bytes] { Transfer(link, buf, bytes, /*send=*/false); });
  return ncclSuccess;
}

}  // extern "C"
