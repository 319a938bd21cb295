#include "coordinator/coordinator_flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "coordinator/jobs/state_dir.h"
#include "engine/model/precision.h"

// Defaults come from CoordinatorSettings, so the struct stays the one place that names them.
ABSL_FLAG(std::string, model, "", "checkpoint directory (config.json, tokenizer.json); workers map the weights at the same path");
ABSL_FLAG(std::string, layer_split, "", "explicit ranges like 0-4,5-5,6-11, one per worker (default: balanced by cost)");
ABSL_FLAG(layerpipe::Precision, precision, layerpipe::CoordinatorSettings().precision, "bf16 or fp32");
ABSL_FLAG(std::string, quantize, layerpipe::CoordinatorSettings().quantize,
          "none, int8 or int4: every worker quantizes its decoder layers' matrices at load (groups of 32 along k)");
ABSL_FLAG(std::string, quantize_head, layerpipe::CoordinatorSettings().quantize_head,
          "none or int8: the stages that hold the embedding / tied head quantize it at load (the int8 rule)");
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

ABSL_FLAG(std::string, http_listen, "",
          "serve the OpenAI-compatible HTTP API on HOST:PORT (port 0: any free port); same TLS and tokens as --listen");
ABSL_FLAG(std::string, served_model_name, "", "the model name the HTTP API answers to (default: the --model directory's name)");
ABSL_FLAG(int64_t, max_model_len, 0, "prompt + generated tokens a request may use (0: the model's context)");
ABSL_FLAG(int32_t, max_new_tokens, 0, "generated tokens a request may ask for (0: no cap below --max-model-len)");
// The default is resolved when the program starts, so that --help shows the directory this process would use.
ABSL_FLAG(std::string, state_dir, layerpipe::DefaultStateDir(),
          "keep jobs in an SQLite database in this directory, so that they survive a restart; the default is "
          "$LAYERPIPE_STATE_DIR, else $XDG_STATE_HOME/layerpipe, else ~/.local/state/layerpipe; '' keeps them in "
          "memory only (a restart loses them)");
ABSL_FLAG(absl::Duration, job_retention, layerpipe::CoordinatorSettings().job_retention,
          "how long finished jobs are kept before they are deleted");

namespace layerpipe {

void ReadSharedCoordinatorFlags(CoordinatorSettings* s) {
  s->model = absl::GetFlag(FLAGS_model);
  s->layer_split = absl::GetFlag(FLAGS_layer_split);
  s->precision = absl::GetFlag(FLAGS_precision);
  s->quantize = absl::GetFlag(FLAGS_quantize);
  s->quantize_head = absl::GetFlag(FLAGS_quantize_head);
  s->prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  s->max_batch = absl::GetFlag(FLAGS_max_batch);
  s->recovery_deadline = absl::GetFlag(FLAGS_recovery_deadline);
  s->step_timeout = absl::GetFlag(FLAGS_step_timeout);
  s->health_interval = absl::GetFlag(FLAGS_health_interval);
  s->drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  s->metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  s->http_listen = absl::GetFlag(FLAGS_http_listen);
  s->served_model_name = absl::GetFlag(FLAGS_served_model_name);
  s->max_model_len = absl::GetFlag(FLAGS_max_model_len);
  s->max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  s->state_dir = absl::GetFlag(FLAGS_state_dir);
  s->job_retention = absl::GetFlag(FLAGS_job_retention);
}

}  // namespace layerpipe
