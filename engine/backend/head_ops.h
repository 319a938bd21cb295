// A backend's logit summaries and whole rows as the sampling head (engine/sampling/head.h) uses them.
#ifndef LAYERPIPE_ENGINE_BACKEND_HEAD_OPS_H_
#define LAYERPIPE_ENGINE_BACKEND_HEAD_OPS_H_

#include <vector>

#include "engine/backend/layer_backend.h"
#include "engine/sampling/head.h"

namespace layerpipe {

inline HeadOps HeadOpsOf(LayerBackend& backend) {
  HeadOps ops;
  ops.summarizes_on_device = backend.summarizes_on_device();
  ops.summarize = [&backend](const float* rows, absl::Span<const LogitRowRequest> requests,
                             std::vector<LogitRowSummary>* out) { return backend.SummarizeLogits(rows, requests, out); };
  ops.logits = [&backend](const float* rows, int64_t m, float* logits) { return backend.Logits(rows, m, logits); };
  return ops;
}

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_BACKEND_HEAD_OPS_H_
