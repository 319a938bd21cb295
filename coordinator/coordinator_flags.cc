#include "coordinator/coordinator_flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "engine/model/precision.h"

// Defaults come from CoordinatorSettings, so the struct stays the one place that names them.
ABSL_FLAG(std::string, model, "", "checkpoint directory (config.json, tokenizer.json); workers map the weights at the same path");
ABSL_FLAG(std::string, layer_split, "", "explicit ranges like 0-4,5-5,6-11, one per worker (default: balanced by cost)");
ABSL_FLAG(layerpipe::Precision, precision, layerpipe::CoordinatorSettings().precision, "bf16 or fp32");
ABSL_FLAG(int64_t, prefill_chunk, layerpipe::CoordinatorSettings().prefill_chunk, "prompt tokens per step for one sequence");
ABSL_FLAG(int, max_batch, layerpipe::CoordinatorSettings().max_batch, "decode sequences per step");
ABSL_FLAG(absl::Duration, recovery_deadline, layerpipe::CoordinatorSettings().recovery_deadline,
          "how long in-flight requests wait for a lost worker to come back before failing with UNAVAILABLE");
ABSL_FLAG(absl::Duration, step_timeout, layerpipe::CoordinatorSettings().step_timeout,
          "a step not back by then means a hung worker");
ABSL_FLAG(absl::Duration, health_interval, layerpipe::CoordinatorSettings().health_interval,
          "how often workers are probed");
ABSL_FLAG(absl::Duration, drain_timeout, layerpipe::CoordinatorSettings().drain_timeout,
          "on SIGTERM, how long admitted requests may take to finish (new ones are refused)");
ABSL_FLAG(std::string, metrics_listen, "",
          "serve Prometheus metrics at http://HOST:PORT/metrics (port 0: any free port)");

namespace layerpipe {

void ReadSharedCoordinatorFlags(CoordinatorSettings* s) {
  s->model = absl::GetFlag(FLAGS_model);
  s->layer_split = absl::GetFlag(FLAGS_layer_split);
  s->precision = absl::GetFlag(FLAGS_precision);
  s->prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  s->max_batch = absl::GetFlag(FLAGS_max_batch);
  s->recovery_deadline = absl::GetFlag(FLAGS_recovery_deadline);
  s->step_timeout = absl::GetFlag(FLAGS_step_timeout);
  s->health_interval = absl::GetFlag(FLAGS_health_interval);
  s->drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  s->metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
}

}  // namespace layerpipe
