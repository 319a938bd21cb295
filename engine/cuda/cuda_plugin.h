// The CUDA backend is a plugin: liblayerpipe_cuda.so, opened with dlopen only when a --device names a
// GPU. Binaries that never use a GPU then neither need the CUDA libraries installed nor carry their
// static TLS (cuBLASLt's 94 KB of it leaves no room on small thread stacks such as civetweb's).
// This header is the whole contract between the plugin and backend/backend_factory.cc.
#ifndef LAYERPIPE_ENGINE_CUDA_CUDA_PLUGIN_H_
#define LAYERPIPE_ENGINE_CUDA_CUDA_PLUGIN_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/backend/layer_backend.h"
#include "engine/model/precision.h"
#include "engine/model/weights.h"

namespace layerpipe {

// Bumped whenever this struct, LayerBackend, SequenceState or ModelWeights change layout, so a stale
// plugin next to a newer binary is refused instead of misread. 2: LayerBackend's device hand-off;
// 4: LayerBackend::SummarizeLogits; 5: JoinPeerLink's PeerLinkKind; 6: summary draws and totals.
inline constexpr int kCudaPluginAbi = 6;
inline constexpr char kCudaPluginFile[] = "liblayerpipe_cuda.so";
inline constexpr char kCudaPluginEntry[] = "layerpipe_cuda_plugin";

struct CudaPluginApi {
  int abi;
  int (*device_count)();
  absl::StatusOr<std::unique_ptr<LayerBackend>> (*make_backend)(const ModelWeights& weights, Precision precision,
                                                                int device);
};

using CudaPluginEntry = const CudaPluginApi* (*)();

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CUDA_CUDA_PLUGIN_H_
