// Picks the backend that runs a stage's layers from a device name ("cpu", "cuda", "cuda:N"), so the
// CLI, the worker and layerpipe-mpi accept the same --device values and refuse the same way.
#ifndef LAYERPIPE_BACKEND_BACKEND_FACTORY_H_
#define LAYERPIPE_BACKEND_BACKEND_FACTORY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/backend/layer_backend.h"

namespace layerpipe {

struct DeviceSpec {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int ordinal = 0;  // CUDA device index

  bool cuda() const { return kind == Kind::kCuda; }
  std::string ToString() const;
};

// InvalidArgument naming the accepted forms for anything else.
absl::StatusOr<DeviceSpec> ParseDevice(absl::string_view name);

// True when this binary was built with the CUDA backend (the toolkit was found at configure time).
bool CudaBackendBuilt();
// Devices the CUDA runtime sees; 0 without the backend, a driver or a GPU.
int CudaDevicesVisible();

// The maker for `device`; FailedPrecondition when the binary has no CUDA backend or the device is not
// there. The CPU maker runs CpuBackend on the pool it is given.
absl::StatusOr<BackendMaker> BackendMakerFor(const DeviceSpec& device);

}  // namespace layerpipe

#endif  // LAYERPIPE_BACKEND_BACKEND_FACTORY_H_
