// The worker's one compute thread: it runs the queued steps of the current assignment in step_id
// order, counts them for Status and metrics, and hands what each produces to the outbox (the next
// stage's frame, the last stage's results, or the error of a step that failed). Members of
// WorkerService, in a file of their own.
#include <chrono>
#include <exception>
#include <new>

#include "absl/strings/str_cat.h"
#include "worker/worker_service.h"

namespace layerpipe {

void WorkerService::ComputeLoop() {
  for (;;) {
    std::shared_ptr<Assignment> a;
    QueuedStep step;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || (!assigning_ && assignment_ && sequencer_.Ready()); });
      if (stopping_) return;
      step = sequencer_.Pop();
      a = assignment_;
      busy_ = true;
      if (idle_since_) {
        idle_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - *idle_since_).count();
        idle_since_.reset();
      }
    }
    RunStep(*a, std::move(step));
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
    idle_since_ = std::chrono::steady_clock::now();
    cv_.notify_all();
  }
}

void WorkerService::RecordStep(const Assignment& a, std::chrono::steady_clock::time_point start) {
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(mu_);
  compute_ms_total_ += ms;
  ++steps_;
  kv_bytes_used_ = a.stage->kv_bytes_used();
  prefix_bytes_ = a.stage->prefix_bytes();
  prefixes_ = static_cast<int>(a.stage->prefixes().size());
  prefix_evictions_ = a.stage->prefixes().evictions();
  kv_sliding_bytes_used_ = a.stage->kv_sliding_bytes_used();
  sequences_ = a.stage->sequences();
  metrics_.OnStep(ms / 1000.0);
}

void WorkerService::RunStep(Assignment& a, QueuedStep step) {
  const auto start = std::chrono::steady_clock::now();
  Stage& stage = *a.stage;
  const StageOptions& so = stage.options();
  const internal::v1::StepFrame& frame = step.frame;
  internal::v1::StepFrame forward;
  internal::v1::StepResult result;
  std::shared_ptr<const DeviceRows> device_rows;  // the output, when the next hop takes device rows
  absl::Status st = step.refusal;
  const bool refused = !st.ok();
  // Before the step runs, so that its budget check sees the room the coordinator counted on: the
  // coordinator admits into what finished sequences and evicted prefixes leave.
  stage.Release(frame.release());
  stage.DropPrefixes(frame.drop_prefix());
  if (!refused) {
    // A step must never take the worker down: an allocation that fails ends this step only.
    try {
      StageInput input{std::move(step.hidden), std::move(step.device_hidden)};
      st = stage.Run(frame, std::move(input), &forward, &result,
                     !so.last && a.next->WantsDeviceRows() ? &device_rows : nullptr);
    } catch (const std::bad_alloc&) {
      st = absl::ResourceExhaustedError("out of memory while running the step");
    } catch (const std::exception& e) {
      st = absl::InternalError(absl::StrCat("the step failed: ", e.what()));
    }
  }
  // Counted before anything is sent: whoever sees this step's result also sees it in Status.
  RecordStep(a, start);

  if (!st.ok()) {
    internal::v1::StepResult failure;
    failure.set_epoch(frame.epoch());
    failure.set_step_id(frame.step_id());
    failure.set_epoch_secret(a.request.epoch_secret());
    failure.set_stage(so.stage);
    failure.set_error_code(static_cast<int>(st.code()));
    failure.set_error(refused ? std::string(st.message())
                              : absl::StrCat("stage ", so.stage, ", step ", frame.step_id(), ": ", st.message()));
    outbox_.Report(a.sink, std::move(failure));
  }
  if (!so.last) {
    if (!st.ok()) {
      // The step goes on without its slices, so the later stages keep their order and free the
      // released sequences too.
      forward.Clear();
      forward.set_epoch(frame.epoch());
      forward.set_step_id(frame.step_id());
      *forward.mutable_release() = frame.release();
      *forward.mutable_drop_prefix() = frame.drop_prefix();
      forward.set_hidden_dtype(stage.wire_dtype());
      device_rows.reset();
    }
    forward.set_epoch_secret(a.request.epoch_secret());
    outbox_.Forward(a.next, a.sink, so.stage, std::move(forward), std::move(device_rows));
  } else if (st.ok()) {
    result.set_epoch_secret(a.request.epoch_secret());
    outbox_.Report(a.sink, std::move(result));
  }
}

}  // namespace layerpipe
