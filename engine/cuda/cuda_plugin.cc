// The plugin's one exported C symbol (engine/cuda/cuda_plugin.h).
#include "engine/cuda/cuda_plugin.h"

#include "engine/cuda/cuda_backend.h"

namespace {

const layerpipe::CudaPluginApi kApi = {layerpipe::kCudaPluginAbi, &layerpipe::CudaDeviceCount,
                                       &layerpipe::MakeCudaBackend};

}  // namespace

extern "C" __attribute__((visibility("default"))) const layerpipe::CudaPluginApi* layerpipe_cuda_plugin() {
  return &kApi;
}
