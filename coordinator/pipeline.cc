#include "coordinator/pipeline.h"

#include "common/log.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "coordinator/scheduling/prefix_keys.h"
#include "coordinator/scheduling/step_frame.h"

namespace layerpipe {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<KvAdmission::Stage> AdmissionStages(const PipelineOptions& opt) {
  std::vector<KvAdmission::Stage> stages(opt.workers.size());
  for (size_t s = 0; s < stages.size(); ++s) {
    stages[s].address = opt.workers[s];
    stages[s].range = opt.ranges[s];
  }
  return stages;
}

}  // namespace

std::string NewEpochSecret() {
  std::random_device rd;
  std::string secret(16, '\0');
  for (char& c : secret) c = static_cast<char>(rd());
  return secret;
}

namespace {

SchedulerLimits LimitsOf(const PipelineOptions& opt) {
  // One step in flight per stage keeps every stage busy.
  return SchedulerLimits{opt.max_batch, opt.prefill_chunk, opt.workers.size()};
}

}  // namespace

Pipeline::Pipeline(const ModelConfig& config, PipelineOptions options)
    : config_(config),
      opt_(std::move(options)),
      admission_(config_, opt_.precision, AdmissionStages(opt_)),
      scheduler_(LimitsOf(opt_)),
      metrics_(opt_.workers, opt_.ranges) {
  metrics_.ReadLevelsWith([this] {
    std::lock_guard<std::mutex> lock(mu_);
    CoordinatorMetrics::Levels l{static_cast<int64_t>(admission_.queued()), static_cast<int64_t>(running_.size()),
                                 static_cast<int64_t>(in_flight_.size()), ready_.load()};
    const PrefixCache& cache = admission_.cache();
    for (size_t s = 0; s < admission_.stages(); ++s) l.prefix_bytes.push_back(cache.bytes(s));
    l.prefix_entries = static_cast<int64_t>(cache.entries());
    l.prefix_evictions = cache.evictions();
    return l;
  });
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(512 << 20);
  args.SetMaxSendMessageSize(512 << 20);
  for (size_t s = 0; s < opt_.workers.size(); ++s) {
    Stage st;
    st.address = opt_.workers[s];
    st.range = opt_.ranges[s];
    st.stub = internal::v1::Worker::NewStub(grpc::CreateCustomChannel(
        st.address, opt_.worker_credentials ? opt_.worker_credentials : grpc::InsecureChannelCredentials(), args));
    stages_.push_back(std::move(st));
  }
}

Pipeline::~Pipeline() { Stop(); }

absl::Status Pipeline::Start(const std::string& self_address, absl::Duration timeout) {
  self_address_ = self_address;
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status last;
  std::string secret;
  {
    std::lock_guard<std::mutex> lock(mu_);
    epoch_ = 1;
    epoch_secret_ = secret = NewEpochSecret();
  }
  for (;;) {
    // Generous: a worker may be mapping and paging in tens of GB.
    last = AssignAll(1, secret, absl::Minutes(10));
    if (last.ok()) break;
    // A worker that refuses its range (bad model dir, bad range) will not change its mind.
    if (!absl::IsUnavailable(last) && !absl::IsDeadlineExceeded(last)) return last;
    if (absl::Now() > deadline) return last;
    absl::SleepFor(absl::Milliseconds(200));
  }
  ready_ = true;
  scheduler_thread_ = std::thread([this] { Run(); });
  health_ = std::thread([this] { HealthLoop(); });
  return absl::OkStatus();
}

void Pipeline::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    FinishAll("cancelled", absl::UnavailableError("the coordinator is shutting down"));
  }
  wake_.notify_all();
  if (scheduler_thread_.joinable()) scheduler_thread_.join();
  if (health_.joinable()) health_.join();
}

void Pipeline::FinishAll(const std::string& reason, const absl::Status& error) {
  auto waiting = running_;
  for (auto& r : admission_.TakeQueue()) waiting.push_back(std::move(r));
  for (auto& r : waiting) Finish(*r, reason, error);
}

absl::Status Pipeline::Submit(std::shared_ptr<Request> r) {
  const RequestKind kind = r->kind;
  // Outside the lock: it hashes the whole prompt and its attachments.
  r->prefix_cuts = PrefixCuts(r->prompt, r->soft, config_.audio.samples_per_token);
  const auto prompt_tokens = static_cast<int64_t>(r->prompt.size());
  absl::Status st = Enqueue(std::move(r));
  metrics_.OnSubmit(kind, prompt_tokens, st);
  return st;
}

absl::Status Pipeline::Enqueue(std::shared_ptr<Request> r) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || draining_) return absl::UnavailableError("the coordinator is shutting down");
  if (!ready_) {
    return absl::UnavailableError(absl::StrCat("the pipeline is not serving: ", fault_.empty() ? "starting" : fault_));
  }
  if (absl::Status st = admission_.Enqueue(std::move(r)); !st.ok()) return st;
  Admit();
  wake_.notify_all();
  return absl::OkStatus();
}

void Pipeline::Admit() {
  for (auto& r : admission_.AdmitWaiting()) {
    r->state = RequestState::kPrefilling;
    r->admitted = Clock::now();
    metrics_.OnAdmitted(*r);
    r->events.Publish([&](RequestView& v) {
      v.state = RequestState::kPrefilling;
      v.admitted = r->admitted;
    });
    running_.push_back(std::move(r));
  }
}

bool Pipeline::Drain(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  draining_ = true;
  return idle_.wait_for(lock, absl::ToChronoMilliseconds(timeout),
                        [&] { return running_.empty() && admission_.queued() == 0; });
}

void Pipeline::Cancel(const std::shared_ptr<Request>& r) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (r->done()) return;
    r->cancel_requested = true;
    if (r->state == RequestState::kQueued) {
      admission_.Withdraw(r);
      Finish(*r, "cancelled", absl::OkStatus());
    } else if (r->in_flight == 0) {
      Finish(*r, "cancelled", absl::OkStatus());
    }  // else: finished when its steps come back
  }
  wake_.notify_all();
}

void Pipeline::Finish(Request& r, const std::string& reason, absl::Status error) {
  if (r.done()) return;
  const bool was_admitted = r.state != RequestState::kQueued;
  r.state = RequestState::kDone;
  r.finish_reason = reason;
  r.error = std::move(error);
  r.finished = Clock::now();
  metrics_.OnFinished(r);
  r.events.Publish([&](RequestView& v) {
    v.state = RequestState::kDone;
    v.finish_reason = r.finish_reason;
    v.error = r.error;
    v.finished = r.finished;
    v.score_logprobs = r.score_logprobs;
    v.logits = r.logits;
  });
  if (was_admitted) {
    admission_.Release(r);
    if (r.sent > 0) pending_release_.push_back(r.id);
    running_.erase(std::remove_if(running_.begin(), running_.end(),
                                  [&](const std::shared_ptr<Request>& p) { return p.get() == &r; }),
                   running_.end());
    Admit();
  }
  if (running_.empty() && admission_.queued() == 0) idle_.notify_all();
}

void Pipeline::OnStepDone(const internal::v1::StepResult& result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Only the stages of this epoch know its secret: anything else (a forged or an old result) is dropped.
    if (result.epoch() != epoch_ || result.epoch_secret() != epoch_secret_) return;
    results_.push_back(result);
  }
  wake_.notify_all();
}

bool Pipeline::NextStep(internal::v1::StepFrame* frame, InFlightStep* step) {
  PrefixCache& cache = admission_.cache();
  std::optional<StepPlan> plan =
      scheduler_.Plan(running_, in_flight_.size(), !pending_release_.empty() || cache.drops_pending());
  if (!plan) return false;
  *frame = BuildStepFrame(*plan, epoch_, next_step_++, pending_release_, config_.audio.samples_per_token,
                          cache.TakeDrops());
  frame->set_epoch_secret(epoch_secret_);
  pending_release_.clear();
  for (const PlannedSlice& s : plan->slices) {
    Request& r = *s.request;
    if (s.pos0 == r.start() && s.pos0 < static_cast<int64_t>(r.prompt.size())) {
      r.cached_tokens = r.start();
      if (!r.prefix_cuts.empty() && cache.enabled()) metrics_.OnPrefixLookup(r.cached_tokens);
      r.events.Publish([&](RequestView& v) { v.cached_tokens = r.cached_tokens; });
    }
    cache.OnSent(r, s.pos0 + s.count);
  }
  Scheduler::MarkSent(*plan);
  step->step_id = frame->step_id();
  step->sent = Clock::now();
  for (const PlannedSlice& s : plan->slices) {
    step->requests.push_back(s.request);
    step->counts.push_back(s.count);
  }
  return true;
}

void Pipeline::HandleToken(Request& r, const internal::v1::SliceResult& s) {
  const int32_t id = s.token();
  r.generated.push_back(id);
  v1::TokenInfo ti;
  ti.set_id(id);
  ti.set_logprob(s.logprob());
  *ti.mutable_top() = s.top();
  const auto now = Clock::now();
  metrics_.OnToken(r, now);
  if (!r.first_token) r.first_token = now;
  r.last_token = now;
  TextStream::Step step = r.text->Push(id);
  const StopChecker::Reason reason = step.reason;
  r.events.Publish([&](RequestView& v) {
    v.state = RequestState::kDecoding;
    v.tokens.push_back(std::move(ti));
    v.pieces.push_back(std::move(step.text));
    v.final_text = std::move(step.final_text);
    v.first_token = r.first_token;
  });
  if (reason == StopChecker::Reason::kNone && r.known() >= config_.max_position_embeddings) {
    Finish(r, "length", absl::OkStatus());
    return;
  }
  if (reason != StopChecker::Reason::kNone) {
    Finish(r, reason == StopChecker::Reason::kMaxTokens ? "length" : "stop", absl::OkStatus());
  }
}

void Pipeline::ApplyResult(const internal::v1::StepResult& res) {
  if (res.epoch() != epoch_) return;  // from before a recovery
  auto it = in_flight_.find(res.step_id());
  if (it == in_flight_.end()) return;
  InFlightStep step = std::move(it->second);
  in_flight_.erase(it);
  if (!res.error().empty()) {
    const auto code = static_cast<absl::StatusCode>(res.error_code());
    const std::string msg = absl::StrCat("stage ", res.stage(), ": ", res.error());
    if (RefusedForGood(code)) {
      FailStep(step, absl::Status(code, msg));
    } else {
      fault_ = msg;
    }
    return;
  }
  std::map<uint64_t, const internal::v1::SliceResult*> by_seq;
  for (const auto& s : res.results()) by_seq[s.seq_id()] = &s;
  for (size_t i = 0; i < step.requests.size(); ++i) {
    Request& r = *step.requests[i];
    --r.in_flight;
    if (r.done()) continue;
    r.fed += step.counts[i];
    const int64_t prefilled = std::min<int64_t>(r.fed, static_cast<int64_t>(r.prompt.size()));
    r.events.Publish([&](RequestView& v) { v.prefilled = prefilled; });
    auto found = by_seq.find(r.id);
    if (r.kind == RequestKind::kGenerate) {
      if (r.fed == r.known()) {
        if (found == by_seq.end()) {
          Finish(r, "error", absl::InternalError("the last stage returned no token for a sampled slice"));
          continue;
        }
        if (r.state == RequestState::kPrefilling) r.state = RequestState::kDecoding;
        HandleToken(r, *found->second);
      }
    } else if (found != by_seq.end()) {
      const auto& s = *found->second;
      r.score_logprobs.insert(r.score_logprobs.end(), s.score_logprobs().begin(), s.score_logprobs().end());
      r.logits.insert(r.logits.end(), s.logits().begin(), s.logits().end());
      if (r.fed == r.known()) Finish(r, "stop", absl::OkStatus());
    }
    if (r.cancel_requested && r.in_flight == 0 && !r.done()) Finish(r, "cancelled", absl::OkStatus());
  }
}

bool Pipeline::RefusedForGood(absl::StatusCode code) {
  // A step a stage rejects for what it carries would be rejected again on replay, and replay after
  // replay (an endless recovery): its requests fail instead. Anything else is a fault, recovered by replay.
  return code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kResourceExhausted ||
         code == absl::StatusCode::kOutOfRange;
}

void Pipeline::FailStep(InFlightStep& step, const absl::Status& error) {
  for (auto& r : step.requests) {
    --r->in_flight;
    if (!r->done()) Finish(*r, "error", error);
  }
}

void Pipeline::RefusedByFirstStage(uint64_t step_id, const grpc::Status& s) {
  const std::string msg = absl::StrCat("stage 0 (", stages_[0].address, ") refused step ", step_id, ": ", s.error_message());
  auto it = in_flight_.find(step_id);
  if (it != in_flight_.end() && RefusedForGood(static_cast<absl::StatusCode>(s.error_code()))) {
    InFlightStep step = std::move(it->second);
    in_flight_.erase(it);
    LP_LOG(WARNING) << msg << "; failing its " << step.requests.size() << " requests";
    FailStep(step, absl::InternalError(msg));
    return;
  }
  if (fault_.empty()) fault_ = msg;
}

void Pipeline::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    while (!results_.empty()) {
      internal::v1::StepResult r = std::move(results_.front());
      results_.pop_front();
      ApplyResult(r);
    }
    for (const auto& [id, step] : in_flight_) {
      if (Clock::now() - step.sent > absl::ToChronoMilliseconds(opt_.step_timeout)) {
        fault_ = absl::StrCat("step ", id, " did not come back within ", absl::FormatDuration(opt_.step_timeout));
        break;
      }
    }
    if (!fault_.empty()) {
      Recover(lock, fault_);
      continue;
    }
    internal::v1::StepFrame frame;
    InFlightStep step;
    if (NextStep(&frame, &step)) {
      in_flight_[step.step_id] = std::move(step);
      lock.unlock();
      internal::v1::StepAck ack;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      grpc::Status s = stages_[0].stub->Step(&ctx, frame, &ack);
      lock.lock();
      if (!s.ok()) RefusedByFirstStage(frame.step_id(), s);
      continue;
    }
    wake_.wait_for(lock, std::chrono::milliseconds(50));
  }
}

v1::ClusterStatusResponse Pipeline::Status() {
  v1::ClusterStatusResponse out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.set_running_sequences(static_cast<int>(running_.size()));
    out.set_queued_requests(static_cast<int>(admission_.queued()));
  }
  out.set_num_layers(config_.num_layers);
  out.set_model(opt_.model_dir);
  out.set_ready(ready_);
  // stages_ never changes after construction: the probes below need no lock.
  for (size_t s = 0; s < stages_.size(); ++s) {
    v1::StageStatus* ss = out.add_stages();
    ss->set_stage(static_cast<int>(s));
    ss->set_address(stages_[s].address);
    ss->set_layer_begin(stages_[s].range.begin);
    ss->set_layer_end(stages_[s].range.end);
    internal::v1::WorkerStatusRequest req;
    internal::v1::WorkerStatus resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    if (stages_[s].stub->Status(&ctx, req, &resp).ok()) {
      ss->set_health(resp.assigned() ? "serving" : "loading");
      ss->set_kv_bytes_used(resp.kv_bytes_used());
      ss->set_kv_bytes_free(resp.kv_capacity_bytes() - resp.kv_bytes_used() - resp.prefix_bytes());
      ss->set_prefix_cache_bytes(resp.prefix_bytes());
      ss->set_prefix_cache_entries(resp.prefixes());
      ss->set_sequences(resp.sequences());
      ss->set_compute_ms_total(resp.compute_ms_total());
    } else {
      ss->set_health("unreachable");
    }
  }
  return out;
}

}  // namespace layerpipe
