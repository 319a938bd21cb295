// The pipeline's fault side: assigning every stage its range, probing the stages, and recovering from a
// fault by assigning a new epoch and replaying every running sequence (scheduling/scheduler.h,
// PrepareReplay). Members of Pipeline, in a file of their own.
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/log.h"
#include "coordinator/pipeline.h"
#include "engine/model/quantize.h"

namespace layerpipe {
namespace {

void SetDeadline(grpc::ClientContext& ctx, absl::Duration d) {
  ctx.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d));
}

}  // namespace

absl::Status Pipeline::AssignAll(uint64_t epoch, const std::string& secret, absl::Duration rpc_deadline) {
  for (size_t s = 0; s < stages_.size(); ++s) {
    Stage& st = stages_[s];
    internal::v1::AssignRequest req;
    req.set_model_dir(opt_.model_dir);
    req.set_layer_begin(st.range.begin);
    req.set_layer_end(st.range.end);
    req.set_first(s == 0);
    req.set_last(s + 1 == stages_.size());
    if (s + 1 < stages_.size()) req.set_next_address(stages_[s + 1].address);
    req.set_coordinator_address(self_address_);
    req.set_epoch(epoch);
    req.set_precision(PrecisionName(opt_.precision));
    req.set_quantize(QuantizationName(opt_.quantize));
    req.set_quantize_head(QuantizationName(opt_.quantize_head));
    req.set_stage(static_cast<int>(s));
    req.set_epoch_secret(secret);
    internal::v1::AssignResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(ctx, rpc_deadline);
    if (auto st2 = FromGrpc(st.stub->Assign(&ctx, req, &resp),
                            absl::StrCat("stage ", s, " (", st.address, ", layers ", st.range.begin, "-",
                                         st.range.end - 1, ")"));
        !st2.ok()) {
      return st2;
    }
    std::lock_guard<std::mutex> lock(mu_);
    admission_.SetCapacity(s, resp.kv_capacity_bytes());
    admission_.cache().SetBudget(s, resp.prefix_cache_bytes());
    admission_.SetDraining(s, false);
  }
  return absl::OkStatus();
}

void Pipeline::Recover(std::unique_lock<std::mutex>& lock, const std::string& why) {
  metrics_.OnRecovery();
  ready_ = false;
  LP_LOG(WARNING) << "pipeline fault: " << why << "; recovering";
  const absl::Time deadline = absl::Now() + opt_.recovery_deadline;
  bool gave_up = false;
  while (!stopping_) {
    ++epoch_;
    next_step_ = 1;  // step ids count from 1 in every epoch
    in_flight_.clear();
    results_.clear();
    pending_release_.clear();  // a new epoch drops every sequence on every worker
    // ... and every kept prefix: the ones running requests use are made again, the rest forgotten.
    admission_.cache().OnNewEpoch(running_);
    for (auto& r : running_) {
      PrepareReplay(*r);
      r->events.Publish([&](RequestView& v) {
        v.state = RequestState::kPrefilling;
        v.prefilled = r->start();
      });
    }
    const uint64_t epoch = epoch_;
    const std::string secret = epoch_secret_ = NewEpochSecret();
    lock.unlock();
    // A hung worker must not hold recovery past its deadline.
    absl::Status st = AssignAll(epoch, secret, std::max(absl::Seconds(5), deadline - absl::Now()));
    lock.lock();
    if (st.ok()) {
      // A stage that came back keeping no prefixes turns the cache off: no request may wait for one.
      if (!admission_.cache().enabled() && admission_.cache().entries() > 0) {
        admission_.TurnCacheOff(running_);
        for (auto& r : running_) r->events.Publish([](RequestView& v) { v.prefilled = 0; });
      }
      fault_.clear();
      ready_ = true;
      Admit();  // a drained stage's replacement lets the queue move again
      LP_LOG(INFO) << "pipeline restored (epoch " << epoch << "), replaying " << running_.size() << " sequences";
      return;
    }
    if (!gave_up && absl::Now() > deadline) {
      gave_up = true;
      const std::string msg = absl::StrCat("no worker served the range again within ",
                                           absl::FormatDuration(opt_.recovery_deadline), ": ", st.message());
      FinishAll("error", absl::UnavailableError(msg));
      fault_ = msg;
    }
    lock.unlock();
    absl::SleepFor(absl::Milliseconds(250));
    lock.lock();
  }
}

void Pipeline::HealthLoop() {
  while (true) {
    for (absl::Time until = absl::Now() + opt_.health_interval; absl::Now() < until;) {
      absl::SleepFor(absl::Milliseconds(20));
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
    }
    if (!ready_) continue;
    for (size_t s = 0; s < stages_.size(); ++s) {
      internal::v1::WorkerStatusRequest req;
      internal::v1::WorkerStatus resp;
      grpc::ClientContext ctx;
      SetDeadline(ctx, std::max(absl::Seconds(2), 2 * opt_.health_interval));
      grpc::Status st = stages_[s].stub->Status(&ctx, req, &resp);
      std::lock_guard<std::mutex> lock(mu_);
      // A worker that restarted has forgotten its range (and every sequence): that is a fault too.
      const bool lost = st.ok() && (!resp.assigned() || resp.epoch() != epoch_);
      if ((!st.ok() || lost) && ready_ && fault_.empty()) {
        fault_ = absl::StrCat("stage ", s, " (", stages_[s].address, ") ",
                              st.ok() ? "lost its assignment" : "is unreachable: " + st.error_message());
        wake_.notify_all();
      }
      metrics_.OnStageStatus(s, st.ok() ? &resp : nullptr);
      const bool draining = st.ok() && resp.draining();
      if (draining && !admission_.draining(s)) {
        LP_LOG(WARNING) << "stage " << s << " (" << stages_[s].address
                        << ") is draining; admission paused until it is replaced";
      }
      admission_.SetDraining(s, draining);
    }
  }
}

}  // namespace layerpipe
