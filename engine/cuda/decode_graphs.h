// CUDA graphs of whole decode steps (every slice one token), one per batch size. A step of a given
// batch size launches the same kernels with the same arguments every time — all that changes per
// step (positions, rotary tables, page pointers) is read from the step's metadata buffer, which is
// uploaded before the replay — so a graph captured once is replayed until a scratch or metadata
// buffer moves, which makes the owner clear the cache.
#ifndef LAYERPIPE_ENGINE_CUDA_DECODE_GRAPHS_H_
#define LAYERPIPE_ENGINE_CUDA_DECODE_GRAPHS_H_

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <set>

#include "absl/status/status.h"

namespace layerpipe::cuda {

class DecodeGraphs {
 public:
  DecodeGraphs() = default;
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;
  ~DecodeGraphs() { Clear(); }

  // Replays the graph for `batch`, capturing `record` (which must only enqueue work on `stream`) first
  // when there is none. The first call for a batch size runs `record` directly instead: a warm-up, so
  // that one-time work (cuBLASLt plans and its first use of a kernel, lazy module loading) never
  // happens inside a capture, where it could invalidate it.
  absl::Status Run(int batch, cudaStream_t stream, const std::function<absl::Status()>& record);
  void Clear();
  size_t size() const { return graphs_.size(); }

 private:
  std::map<int, cudaGraphExec_t> graphs_;
  std::set<int> warmed_;  // batch sizes run directly once since the last Clear()
};

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_DECODE_GRAPHS_H_
