// Entry points of the CUDA backend. Binaries reach them through the plugin entry (cuda_plugin.h); the
// GPU tests and bench_cuda link the plugin library and call them directly, hence the export.
#ifndef LAYERPIPE_ENGINE_CUDA_CUDA_BACKEND_H_
#define LAYERPIPE_ENGINE_CUDA_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/backend/layer_backend.h"
#include "engine/model/precision.h"
#include "engine/model/weights.h"

namespace layerpipe {

// Runs the layers of `weights` on CUDA device `device`; weights are copied to the device once (bf16).
__attribute__((visibility("default"))) absl::StatusOr<std::unique_ptr<LayerBackend>> MakeCudaBackend(const ModelWeights& weights, Precision precision, int device);
// Devices the CUDA runtime sees; 0 when there is no driver or GPU (never fails).
__attribute__((visibility("default"))) int CudaDeviceCount();

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CUDA_CUDA_BACKEND_H_
