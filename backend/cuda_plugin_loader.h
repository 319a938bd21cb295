// Finds and opens the CUDA backend plugin (engine/cuda/cuda_plugin.h) once per process.
#ifndef LAYERPIPE_BACKEND_CUDA_PLUGIN_LOADER_H_
#define LAYERPIPE_BACKEND_CUDA_PLUGIN_LOADER_H_

#include "absl/status/statusor.h"
#include "engine/cuda/cuda_plugin.h"

namespace layerpipe {

// Tries $LAYERPIPE_CUDA_PLUGIN, then liblayerpipe_cuda.so next to the running binary, then the
// dynamic linker's search path. The error names every place tried and why each failed (a missing
// libcudart shows up here). The plugin stays loaded for the life of the process.
absl::StatusOr<const CudaPluginApi*> LoadCudaPlugin();

}  // namespace layerpipe

#endif  // LAYERPIPE_BACKEND_CUDA_PLUGIN_LOADER_H_
