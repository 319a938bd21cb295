#include "engine/cuda/device_rows.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/scoped_device.h"

namespace layerpipe::cuda {
namespace {

// Freed rows the pool keeps for reuse instead of returning to the driver at every synchronization
// (its default is to keep nothing). A 512-row prefill frame of the 12B model is 7.5 MiB; this holds
// dozens of frames in flight while staying small next to the weights and caches.
constexpr uint64_t kPoolKeepBytes = uint64_t{256} << 20;

}  // namespace

absl::StatusOr<bool> CudaDeviceRows::PreparePool(int device) {
  int supported = 0;
  LP_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device));
  if (supported == 0) return false;
  cudaMemPool_t pool = nullptr;
  LP_CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t keep = 0;
  LP_CUDA_RETURN_IF_ERROR(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  if (keep < kPoolKeepBytes) {  // never lower what someone else in the process asked for
    keep = kPoolKeepBytes;
    LP_CUDA_RETURN_IF_ERROR(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  // Rows a link was still receiving into are freed behind that receive, which waits for the peer. The
  // pool must not hand their memory to another stream by making it wait for that free: it reuses
  // memory only once the free is done, or in order on the same stream.
  int internal_dependencies = 0;
  LP_CUDA_RETURN_IF_ERROR(
      cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &internal_dependencies));
  return true;
}

absl::StatusOr<std::unique_ptr<CudaDeviceRows>> CudaDeviceRows::Allocate(
    std::shared_ptr<Stream> producer, int64_t rows, int64_t width, std::shared_ptr<const std::atomic<bool>> lost) {
  if (producer == nullptr) return absl::InvalidArgumentError("device rows need a producer stream");
  if (rows < 0 || width < 0) {
    return absl::InvalidArgumentError(absl::StrCat("device rows of negative shape [", rows, ", ", width, "]"));
  }
  if (width > 0 && rows > std::numeric_limits<int64_t>::max() / int64_t{sizeof(float)} / width) {
    return absl::InvalidArgumentError(absl::StrCat("device rows [", rows, ", ", width, "] overflow a size"));
  }
  ScopedDevice on(producer->device());
  LP_RETURN_IF_ERROR(on.status());
  std::unique_ptr<CudaDeviceRows> r(new CudaDeviceRows(std::move(producer), rows, width, std::move(lost)));
  LP_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&r->ready_, cudaEventDisableTiming));
  if (r->bytes() > 0) {
    void* p = nullptr;
    LP_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&p, r->bytes(), r->producer_->get()));
    r->data_ = static_cast<float*>(p);
  }
  return r;
}

CudaDeviceRows::~CudaDeviceRows() {
  ScopedDevice on(device());
  if (data_ != nullptr) cudaFreeAsync(data_, producer_->get());
  if (ready_ != nullptr) cudaEventDestroy(ready_);
}

absl::Status CudaDeviceRows::MarkReady() {
  ScopedDevice on(device());
  LP_RETURN_IF_ERROR(on.status());
  LP_CUDA_RETURN_IF_ERROR(cudaEventRecord(ready_, producer_->get()));
  return absl::OkStatus();
}

absl::Status CudaDeviceRows::Filled() const {
  if (lost_ != nullptr && lost_->load(std::memory_order_acquire)) {
    return absl::UnavailableError("these device rows never arrived: their peer link was aborted first");
  }
  return absl::OkStatus();
}

absl::StatusOr<const CudaDeviceRows*> RowsToSend(const DeviceRows* rows, int device) {
  const auto* r = dynamic_cast<const CudaDeviceRows*>(rows);
  if (r == nullptr) return absl::InvalidArgumentError("a peer link sends only device rows made by the CUDA plugin");
  if (r->device() != device) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows on cuda:", r->device(), " cannot be sent by a peer link on cuda:", device));
  }
  return r;
}

absl::Status CudaDeviceRows::CopyToHost(float* out) const {
  if (bytes() == 0) return Filled();
  ScopedDevice on(device());
  LP_RETURN_IF_ERROR(on.status());
  LP_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(ready_));
  LP_RETURN_IF_ERROR(Filled());
  // On the legacy stream, which our non-blocking streams never wait for: the event already ordered it.
  LP_CUDA_RETURN_IF_ERROR(cudaMemcpy(out, data_, bytes(), cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

}  // namespace layerpipe::cuda
