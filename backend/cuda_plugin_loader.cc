#include "backend/cuda_plugin_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/self_path.h"

namespace layerpipe {
namespace {

std::vector<std::string> Candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("LAYERPIPE_CUDA_PLUGIN"); env != nullptr && *env != '\0') out.push_back(env);
  // Installed next to the executable.
  if (std::string sibling = SiblingPath(kCudaPluginFile); !sibling.empty()) out.push_back(sibling);
  out.push_back(kCudaPluginFile);  // LD_LIBRARY_PATH, ld.so.cache
  return out;
}

absl::StatusOr<const CudaPluginApi*> Open() {
  std::vector<std::string> tried;
  for (const std::string& path : Candidates()) {
    // RTLD_LOCAL: the plugin's engine copy and CUDA libraries stay out of the binary's namespace.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      tried.push_back(absl::StrCat(path, " (", why ? why : "not loadable", ")"));
      continue;
    }
    auto entry = reinterpret_cast<CudaPluginEntry>(dlsym(handle, kCudaPluginEntry));
    if (entry == nullptr) {
      tried.push_back(absl::StrCat(path, " (no ", kCudaPluginEntry, " symbol)"));
      dlclose(handle);
      continue;
    }
    const CudaPluginApi* api = entry();
    if (api == nullptr || api->abi != kCudaPluginAbi) {
      tried.push_back(absl::StrCat(path, " (plugin ABI ", api ? api->abi : -1, ", this binary needs ",
                                   kCudaPluginAbi, ": rebuild them together)"));
      dlclose(handle);
      continue;
    }
    return api;
  }
  return absl::FailedPreconditionError(
      absl::StrCat("cannot load the CUDA backend plugin; tried ", absl::StrJoin(tried, "; ")));
}

}  // namespace

absl::StatusOr<const CudaPluginApi*> LoadCudaPlugin() {
  static std::once_flag once;
  static absl::StatusOr<const CudaPluginApi*>* result = nullptr;
  std::call_once(once, [] { result = new absl::StatusOr<const CudaPluginApi*>(Open()); });
  return *result;
}

}  // namespace layerpipe
