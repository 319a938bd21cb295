#include "engine/cuda/decode_graphs.h"

#include "engine/cuda/cuda_check.h"

namespace layerpipe::cuda {

absl::Status DecodeGraphs::Run(int batch, cudaStream_t stream, const std::function<absl::Status()>& record) {
  auto it = graphs_.find(batch);
  if (it == graphs_.end() && warmed_.insert(batch).second) return record();
  if (it == graphs_.end()) {
    LP_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const absl::Status recorded = record();
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    if (!recorded.ok() || ended != cudaSuccess) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      cudaGetLastError();  // a failed capture leaves a (non-sticky) launch error behind; clear it
      if (!recorded.ok()) return recorded;
      return CudaStatus(ended, "cudaStreamEndCapture");
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    LP_CUDA_RETURN_IF_ERROR(inst);
    it = graphs_.emplace(batch, exec).first;
  }
  LP_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second, stream));
  return absl::OkStatus();
}

void DecodeGraphs::Clear() {
  for (auto& [batch, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
  warmed_.clear();
}

}  // namespace layerpipe::cuda
