// Sampling's per-row summaries (engine/sampling/logit_summary.h) computed where the last stage's logits
// are, by the kernels of kernels_sample.cu: only each row's statistics and its few selected entries
// cross to the host, in one buffer with the requests' parameters, instead of [rows, vocab] floats.
// The requests are checked before anything runs, so that a bad one costs no device work.
#ifndef LAYERPIPE_ENGINE_CUDA_DEVICE_SUMMARIES_H_
#define LAYERPIPE_ENGINE_CUDA_DEVICE_SUMMARIES_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/cuda/device_buffer.h"
#include "engine/sampling/logit_summary.h"

namespace layerpipe::cuda {

// The most that any one request of a call asks for, which sizes the result sections of every row.
struct SummaryCaps {
  int best = 0, top = 0;
  size_t penalized = 0;  // penalised ids of all the requests together
};

// InvalidArgument for a request the kernels cannot serve, naming it.
absl::StatusOr<SummaryCaps> CheckSummaryRequests(absl::Span<const LogitRowRequest> requests, int64_t vocab);

class DeviceSummaries {
 public:
  // `logits`: [requests.size()][vocab] raw (softcapped) logits on the device, written on `stream`;
  // `caps` from CheckSummaryRequests(requests, vocab).
  absl::Status Run(const float* logits, int64_t vocab, absl::Span<const LogitRowRequest> requests,
                   const SummaryCaps& caps, cudaStream_t stream, std::vector<LogitRowSummary>* out);

 private:
  DeviceBuffer prepared_, summary_;  // the prepared rows; requests and results
  PinnedBuffer summary_host_;
};

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_DEVICE_SUMMARIES_H_
