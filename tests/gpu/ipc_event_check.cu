// Checks, with two processes on one GPU, the CUDA IPC event behaviour the same-device peer link
// (engine/cuda/links/ipc_link.cc) rests on: once one process's cudaEventRecord call has returned, a
// cudaStreamWaitEvent in the other process waits for that record's work — whichever of the two
// created the event. Each side in turn queues ~300 ms of spinning, records the shared event behind it
// and tells the other over a pipe; the other must find the event not ready and its stream held back.
// Exit status 0 when both directions behave. Run by tests/gpu/run.sh.
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace {

constexpr unsigned long long kSpinNs = 300'000'000ull;
constexpr double kMinWaitMs = 150;  // well above any launch latency, well below the spin

__device__ unsigned long long GlobalNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void Spin(unsigned long long ns) {
  const unsigned long long start = GlobalNs();
  while (GlobalNs() - start < ns) {
  }
}

__global__ void Touch(int* flag) { *flag = 1; }

bool Ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "ipc_event_check: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Spins on the device, records `event` behind it, then tells the peer.
bool RecordBehindSpin(cudaEvent_t event, int tell_fd) {
  cudaStream_t s;
  if (!Ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream")) return false;
  Spin<<<1, 1, 0, s>>>(kSpinNs);
  if (!Ok(cudaGetLastError(), "spin launch") || !Ok(cudaEventRecord(event, s), "record")) return false;
  const char c = 'r';
  if (write(tell_fd, &c, 1) != 1) return false;
  return Ok(cudaStreamSynchronize(s), "spin");
}

// Waits for the peer's word, then checks that `event` is pending and holds a stream back.
bool WaitBehindPeer(cudaEvent_t event, int hear_fd, const char* who) {
  char c;
  if (read(hear_fd, &c, 1) != 1) return false;
  const auto t0 = std::chrono::steady_clock::now();
  const cudaError_t state = cudaEventQuery(event);
  cudaGetLastError();
  cudaStream_t s;
  int* flag = nullptr;
  if (!Ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream") || !Ok(cudaMalloc(&flag, sizeof(int)), "malloc") ||
      !Ok(cudaStreamWaitEvent(s, event, 0), "wait event")) {
    return false;
  }
  Touch<<<1, 1, 0, s>>>(flag);
  if (!Ok(cudaStreamSynchronize(s), "touch")) return false;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const bool ok = state == cudaErrorNotReady && ms >= kMinWaitMs;
  std::printf("ipc_event_check: %s: event %s right after the peer's record, stream held %.0f ms: %s\n", who,
              state == cudaErrorNotReady ? "pending" : "already complete", ms, ok ? "ok" : "FAILED");
  cudaFree(flag);
  return ok;
}

int Child(int hear_fd, int tell_fd) {
  cudaIpcEventHandle_t handle;
  if (read(hear_fd, &handle, sizeof(handle)) != sizeof(handle)) return 2;
  if (!Ok(cudaSetDevice(0), "set device")) return 2;
  cudaEvent_t event;
  if (!Ok(cudaIpcOpenEventHandle(&event, handle), "open event handle")) return 2;
  // 1: the importer records, the exporter waits (the link's "drained" events).
  if (!RecordBehindSpin(event, tell_fd)) return 2;
  // 2: the exporter records, the importer waits (the link's "filled" events).
  if (!WaitBehindPeer(event, hear_fd, "importer waits for the exporter")) return 1;
  cudaEventDestroy(event);
  return 0;
}

}  // namespace

int main() {
  int down[2], up[2];
  if (pipe(down) != 0 || pipe(up) != 0) return 2;
  // Before any CUDA call: a process that has initialised CUDA cannot use it in a forked child.
  const pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) std::_Exit(Child(down[0], up[1]));

  bool ok = Ok(cudaSetDevice(0), "set device");
  cudaEvent_t event;
  cudaIpcEventHandle_t handle;
  ok = ok && Ok(cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventInterprocess), "event") &&
       Ok(cudaIpcGetEventHandle(&handle, event), "event handle");
  ok = ok && write(down[1], &handle, sizeof(handle)) == sizeof(handle);
  ok = ok && WaitBehindPeer(event, up[0], "exporter waits for the importer");
  ok = ok && RecordBehindSpin(event, down[1]);
  int status = 0;
  if (!ok) kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::printf("ipc_event_check: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
