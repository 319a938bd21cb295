// Hidden rows in one device's memory (engine/backend/device_handoff.h), as the CUDA backend and the NCCL link
// make them. The memory comes from the device's stream-ordered pool on the producer's stream and goes
// back to it on that stream, so neither allocating nor freeing waits for the device: a free that
// synchronized the device would stall behind a link's transfer that waits for its peer.
#ifndef LAYERPIPE_ENGINE_CUDA_DEVICE_ROWS_H_
#define LAYERPIPE_ENGINE_CUDA_DEVICE_ROWS_H_

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/cuda/stream.h"
#include "engine/backend/device_handoff.h"

namespace layerpipe::cuda {

class CudaDeviceRows final : public DeviceRows {
 public:
  // Readies `device`'s default pool for rows: true when the device has stream-ordered pools at all.
  // Keeps freed rows cached in the pool across synchronizations, since a pipeline makes a few per step.
  static absl::StatusOr<bool> PreparePool(int device);

  // [rows, width] fp32 with undefined contents, allocated in order on `producer`, where the producer
  // then writes them and calls MarkReady. `lost`, when given, is raised by the producer if it gave up
  // before writing (a link aborted with the transfer pending).
  static absl::StatusOr<std::unique_ptr<CudaDeviceRows>> Allocate(std::shared_ptr<Stream> producer, int64_t rows,
                                                                  int64_t width,
                                                                  std::shared_ptr<const std::atomic<bool>> lost = nullptr);
  CudaDeviceRows(const CudaDeviceRows&) = delete;
  CudaDeviceRows& operator=(const CudaDeviceRows&) = delete;
  // The free is ordered after the producer's stream only: a consumer on another stream must have
  // finished with the rows (the host saw it complete) before it lets go of them.
  ~CudaDeviceRows() override;

  int64_t rows() const override { return rows_; }
  int64_t width() const override { return width_; }
  absl::Status CopyToHost(float* out) const override;

  int device() const { return producer_->device(); }
  float* data() const { return data_; }
  size_t bytes() const { return static_cast<size_t>(rows_ * width_) * sizeof(float); }
  // Completes once the producer has written the rows; consumers on other streams wait for it.
  cudaEvent_t ready() const { return ready_; }
  // Records `ready` on the producer's stream, after the work that writes the rows.
  absl::Status MarkReady();
  // An error when the rows were never written although `ready` completed (see `lost` above). Only
  // meaningful once `ready` has completed.
  absl::Status Filled() const;

 private:
  CudaDeviceRows(std::shared_ptr<Stream> producer, int64_t rows, int64_t width,
                 std::shared_ptr<const std::atomic<bool>> lost)
      : producer_(std::move(producer)), rows_(rows), width_(width), lost_(std::move(lost)) {}

  std::shared_ptr<Stream> producer_;
  int64_t rows_, width_;
  std::shared_ptr<const std::atomic<bool>> lost_;
  float* data_ = nullptr;
  cudaEvent_t ready_ = nullptr;
};

// The CUDA rows behind `rows`, for a peer link on `device` to send: InvalidArgument when they are not
// the plugin's or live on another device.
absl::StatusOr<const CudaDeviceRows*> RowsToSend(const DeviceRows* rows, int device);

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_DEVICE_ROWS_H_
