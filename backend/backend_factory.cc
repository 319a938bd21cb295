#include "backend/backend_factory.h"

#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "backend/cuda_plugin_loader.h"
#include "engine/cpu/cpu_backend.h"

namespace layerpipe {

std::string DeviceSpec::ToString() const { return cuda() ? absl::StrCat("cuda:", ordinal) : "cpu"; }

absl::StatusOr<DeviceSpec> ParseDevice(absl::string_view name) {
  DeviceSpec spec;
  if (name == "cpu") return spec;
  spec.kind = DeviceSpec::Kind::kCuda;
  if (name == "cuda") return spec;
  absl::string_view rest = name;
  int ordinal = -1;
  if (absl::ConsumePrefix(&rest, "cuda:") && absl::SimpleAtoi(rest, &ordinal) && ordinal >= 0) {
    spec.ordinal = ordinal;
    return spec;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("device \"", name, "\" is not one of cpu, cuda, cuda:N (N a device index)"));
}

bool CudaBackendBuilt() {
#ifdef LAYERPIPE_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int CudaDevicesVisible() {
  if (!CudaBackendBuilt()) return 0;
  auto plugin = LoadCudaPlugin();
  return plugin.ok() ? (*plugin)->device_count() : 0;
}

absl::StatusOr<BackendMaker> BackendMakerFor(const DeviceSpec& device) {
  if (!device.cuda()) {
    return BackendMaker([](const ModelWeights& w, Precision p,
                           ThreadPool& pool) -> absl::StatusOr<std::unique_ptr<LayerBackend>> {
      return std::make_unique<CpuBackend>(w, p, pool);
    });
  }
  if (!CudaBackendBuilt()) {
    return absl::FailedPreconditionError(
        absl::StrCat("device ", device.ToString(),
                     ": this build has no CUDA backend (no CUDA toolkit was found when it was configured)"));
  }
  auto plugin = LoadCudaPlugin();
  if (!plugin.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("device ", device.ToString(), ": ", plugin.status().message()));
  }
  const CudaPluginApi* api = *plugin;
  const int visible = api->device_count();
  if (device.ordinal >= visible) {
    return absl::FailedPreconditionError(absl::StrCat("device ", device.ToString(), ": ", visible,
                                                      " CUDA device(s) visible to this process"));
  }
  const int ordinal = device.ordinal;
  return BackendMaker([api, ordinal](const ModelWeights& w, Precision p,
                                     ThreadPool&) -> absl::StatusOr<std::unique_ptr<LayerBackend>> {
    return api->make_backend(w, p, ordinal);
  });
}

}  // namespace layerpipe
