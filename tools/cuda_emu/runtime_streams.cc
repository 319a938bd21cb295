// The runtime's stream, event and graph calls: every stream a host thread that runs its queue in
// order, events as record counters (an interprocess event's in a shared page), thread-local capture into
// graphs whose replays re-run the captured work.
#include <cuda_runtime_api.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "tools/cuda_emu/runtime_state.h"

using namespace lpemu;  // NOLINT: the definitions below are the runtime's C API

extern "C" {

cudaError_t cudaDeviceSynchronize() {
  if (RefusedByCapture()) return cudaErrorStreamCaptureUnsupported;
  State& st = S();
  std::unique_lock<std::mutex> l(st.mu);
  std::vector<std::pair<CUstream_st*, uint64_t>> marks;
  for (CUstream_st* s : st.streams) marks.emplace_back(s, s->enqueued);
  if (st.legacy != nullptr) marks.emplace_back(st.legacy, st.legacy->enqueued);
  for (auto& [s, mark] : marks) WaitDone(l, s, mark);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (flags != cudaStreamDefault && flags != cudaStreamNonBlocking) return Fail(cudaErrorInvalidValue);
  CUstream_st* s = NewStream(CurrentDevice());
  State& st = S();
  std::lock_guard<std::mutex> l(st.mu);
  st.streams.insert(s);
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  State& st = S();
  std::lock_guard<std::mutex> l(st.mu);
  if (st.streams.erase(stream) == 0) return Fail(cudaErrorInvalidResourceHandle);
  if (stream->capture != nullptr) {
    std::fprintf(stderr, "CUDA emulator: a stream destroyed while it captures\n");
    std::abort();
  }
  stream->stopping = true;  // its worker finishes the queue, then frees it
  st.cv.notify_all();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  CUstream_st* s = Resolve(stream);
  if (!IsLive(s)) return Fail(cudaErrorInvalidResourceHandle);
  if (s->capture != nullptr || RefusedByCapture()) {
    std::lock_guard<std::mutex> l(S().mu);
    if (s->capture != nullptr) s->capture_invalid = true;
    return Fail(cudaErrorStreamCaptureUnsupported);
  }
  std::unique_lock<std::mutex> l(S().mu);
  WaitDone(l, s, s->enqueued);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  CUstream_st* s = Resolve(stream);
  if (!IsLive(s)) return Fail(cudaErrorInvalidResourceHandle);
  if (RefusedByCapture()) return cudaErrorStreamCaptureUnsupported;
  std::lock_guard<std::mutex> l(S().mu);
  return s->done >= s->enqueued ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if ((flags & cudaEventInterprocess) != 0 && (flags & cudaEventDisableTiming) == 0) return Fail(cudaErrorInvalidValue);
  auto* e = new CUevent_st();
  e->flags = flags;
  if ((flags & cudaEventInterprocess) != 0) {
    e->fd = memfd_create("lpemu-event", MFD_CLOEXEC);
    void* page = MAP_FAILED;
    if (e->fd < 0 || ftruncate(e->fd, sizeof(EventProgress)) != 0 ||
        (page = mmap(nullptr, sizeof(EventProgress), PROT_READ | PROT_WRITE, MAP_SHARED, e->fd, 0)) == MAP_FAILED) {
      if (e->fd >= 0) close(e->fd);
      delete e;
      return Fail(cudaErrorMemoryAllocation);
    }
    e->progress = new (page) EventProgress();
  } else {
    e->progress = new EventProgress();
  }
  *event = e;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

// Events are not freed: work still queued may record or wait on one after cudaEventDestroy, and tests
// create few of them.
cudaError_t cudaEventDestroy(cudaEvent_t event) { return event == nullptr ? Fail(cudaErrorInvalidResourceHandle) : cudaSuccess; }

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  CUstream_st* s = Resolve(stream);
  if (!IsLive(s)) return Fail(cudaErrorInvalidResourceHandle);
  if (s->capture != nullptr) {
    std::fprintf(stderr, "CUDA emulator: event records inside a capture are not emulated\n");
    std::lock_guard<std::mutex> l(S().mu);
    s->capture_invalid = true;
    return Fail(cudaErrorStreamCaptureUnsupported);
  }
  uint64_t generation;
  {
    std::lock_guard<std::mutex> l(S().mu);
    generation = ++event->progress->recorded;
  }
  EventProgress* progress = event->progress;
  Enqueue(s, [progress, generation] {
    State& st = S();
    std::lock_guard<std::mutex> l(st.mu);
    uint64_t done = progress->completed.load();
    while (done < generation && !progress->completed.compare_exchange_weak(done, generation)) {
    }
    st.cv.notify_all();
  });
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  CUstream_st* s = Resolve(stream);
  if (!IsLive(s) || event == nullptr || flags != 0) return Fail(cudaErrorInvalidValue);
  uint64_t generation;
  {
    std::lock_guard<std::mutex> l(S().mu);
    generation = event->progress->recorded.load();  // the record most recent at this call
  }
  if (s->capture != nullptr) {
    std::fprintf(stderr, "CUDA emulator: event waits inside a capture are not emulated\n");
    std::lock_guard<std::mutex> l(S().mu);
    s->capture_invalid = true;
    return Fail(cudaErrorStreamCaptureUnsupported);
  }
  if (generation == 0) return cudaSuccess;
  Enqueue(s, [event, generation] {
    std::unique_lock<std::mutex> l(S().mu);
    WaitEvent(l, event, generation);
  });
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (RefusedByCapture()) return cudaErrorStreamCaptureUnsupported;
  std::lock_guard<std::mutex> l(S().mu);
  return event->progress->completed.load() >= event->progress->recorded.load() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (RefusedByCapture()) return cudaErrorStreamCaptureUnsupported;
  State& st = S();
  std::unique_lock<std::mutex> l(st.mu);
  WaitEvent(l, event, event->progress->recorded.load());
  return cudaSuccess;
}

cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t* handle, cudaEvent_t event) {
  if ((event->flags & cudaEventInterprocess) == 0 || event->fd < 0) return Fail(cudaErrorInvalidResourceHandle);
  const IpcHandle h{kIpcMagic, getpid(), event->fd, sizeof(EventProgress), 0, sizeof(EventProgress)};
  std::memset(handle, 0, sizeof(*handle));
  std::memcpy(handle->reserved, &h, sizeof(h));
  return cudaSuccess;
}

cudaError_t cudaIpcOpenEventHandle(cudaEvent_t* event, cudaIpcEventHandle_t handle) {
  cudaError_t e;
  Allocation page{0, Memory::kImported};
  if (!OpenIpc(handle.reserved, sizeof(EventProgress), &page, &e)) return Fail(e);
  auto* ev = new CUevent_st();
  ev->flags = cudaEventDisableTiming | cudaEventInterprocess;
  ev->progress = reinterpret_cast<EventProgress*>(page.region);
  *event = ev;
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  CUstream_st* s = Resolve(stream);
  if (s == S().legacy || !IsLive(s)) return Fail(cudaErrorStreamCaptureUnsupported);
  if (mode != cudaStreamCaptureModeThreadLocal) {
    std::fprintf(stderr, "CUDA emulator: only thread-local capture is emulated\n");
    return Fail(cudaErrorNotSupported);
  }
  State& st = S();
  std::unique_lock<std::mutex> l(st.mu);
  if (s->capture != nullptr || tls_capturing != nullptr) return Fail(cudaErrorIllegalState);
  // Work enqueued before the capture still runs first; the graph's launches come after it.
  s->capture = new CUgraph_st();
  s->capture_invalid = false;
  tls_capturing = s;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  CUstream_st* s = Resolve(stream);
  State& st = S();
  std::unique_lock<std::mutex> l(st.mu);
  if (s->capture == nullptr || tls_capturing != s) return Fail(cudaErrorIllegalState);
  CUgraph_st* g = s->capture;
  const bool invalid = s->capture_invalid;
  s->capture = nullptr;
  tls_capturing = nullptr;
  if (invalid) {
    delete g;
    *graph = nullptr;
    return Fail(cudaErrorStreamCaptureInvalidated);
  }
  *graph = g;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  if (graph == nullptr || flags != 0) return Fail(cudaErrorInvalidValue);
  auto* e = new CUgraphExec_st();
  e->ops = graph->ops;
  *exec = e;
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  CUstream_st* s = Resolve(stream);
  if (exec == nullptr || !IsLive(s)) return Fail(cudaErrorInvalidResourceHandle);
  for (const Op& op : exec->ops) Enqueue(s, op);
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

}  // extern "C"
