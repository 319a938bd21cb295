#include "coordinator/pipeline.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "engine/model/kv_bytes.h"

namespace layerpipe {
namespace {

using Clock = std::chrono::steady_clock;

void SetDeadline(grpc::ClientContext& ctx, absl::Duration d) {
  ctx.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d));
}

}  // namespace

Pipeline::Pipeline(const ModelConfig& config, PipelineOptions options)
    : config_(config), opt_(std::move(options)), metrics_(opt_.workers, opt_.ranges) {
  metrics_.ReadLevelsWith([this] {
    std::lock_guard<std::mutex> lock(mu_);
    return CoordinatorMetrics::Levels{static_cast<int64_t>(queue_.size()), static_cast<int64_t>(running_.size()),
                                      static_cast<int64_t>(in_flight_.size()), ready_.load()};
  });
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(512 << 20);
  args.SetMaxSendMessageSize(512 << 20);
  for (size_t s = 0; s < opt_.workers.size(); ++s) {
    Stage st;
    st.address = opt_.workers[s];
    st.range = opt_.ranges[s];
    st.stub = v1::Worker::NewStub(grpc::CreateCustomChannel(
        st.address, opt_.worker_credentials ? opt_.worker_credentials : grpc::InsecureChannelCredentials(), args));
    stages_.push_back(std::move(st));
  }
}

Pipeline::~Pipeline() { Stop(); }

absl::Status Pipeline::AssignAll(uint64_t epoch, absl::Duration rpc_deadline) {
  for (size_t s = 0; s < stages_.size(); ++s) {
    Stage& st = stages_[s];
    v1::AssignRequest req;
    req.set_model_dir(opt_.model_dir);
    req.set_layer_begin(st.range.begin);
    req.set_layer_end(st.range.end);
    req.set_first(s == 0);
    req.set_last(s + 1 == stages_.size());
    if (s + 1 < stages_.size()) req.set_next_address(stages_[s + 1].address);
    req.set_coordinator_address(self_address_);
    req.set_epoch(epoch);
    req.set_precision(PrecisionName(opt_.precision));
    req.set_stage(static_cast<int>(s));
    v1::AssignResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(ctx, rpc_deadline);
    if (auto st2 = FromGrpc(st.stub->Assign(&ctx, req, &resp),
                            absl::StrCat("stage ", s, " (", st.address, ", layers ", st.range.begin, "-",
                                         st.range.end - 1, ")"));
        !st2.ok()) {
      return st2;
    }
    st.kv_capacity = resp.kv_capacity_bytes();
    st.draining = false;
  }
  return absl::OkStatus();
}

absl::Status Pipeline::Start(const std::string& self_address, absl::Duration timeout) {
  self_address_ = self_address;
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    epoch_ = 1;
  }
  for (;;) {
    // Generous: a worker may be mapping and paging in tens of GB.
    last = AssignAll(1, absl::Minutes(10));
    if (last.ok()) break;
    // A worker that refuses its range (bad model dir, bad range) will not change its mind.
    if (!absl::IsUnavailable(last) && !absl::IsDeadlineExceeded(last)) return last;
    if (absl::Now() > deadline) return last;
    absl::SleepFor(absl::Milliseconds(200));
  }
  ready_ = true;
  scheduler_ = std::thread([this] { Run(); });
  health_ = std::thread([this] { HealthLoop(); });
  return absl::OkStatus();
}

void Pipeline::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& r : running_) Finish(*r, "cancelled", absl::UnavailableError("the coordinator is shutting down"));
    for (auto& r : queue_) Finish(*r, "cancelled", absl::UnavailableError("the coordinator is shutting down"));
    queue_.clear();
  }
  wake_.notify_all();
  if (scheduler_.joinable()) scheduler_.join();
  if (health_.joinable()) health_.join();
}

absl::Status Pipeline::Submit(std::shared_ptr<Request> r) {
  const RequestKind kind = r->kind;
  const auto prompt_tokens = static_cast<int64_t>(r->prompt.size());
  absl::Status st = Enqueue(std::move(r));
  metrics_.OnSubmit(kind, prompt_tokens, st);
  return st;
}

absl::Status Pipeline::Enqueue(std::shared_ptr<Request> r) {
  const int64_t tokens =
      static_cast<int64_t>(r->prompt.size()) + (r->kind == RequestKind::kGenerate ? r->max_new_tokens : 0);
  r->kv_reserved.assign(stages_.size(), 0);
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || draining_) return absl::UnavailableError("the coordinator is shutting down");
  if (!ready_) {
    return absl::UnavailableError(absl::StrCat("the pipeline is not serving: ", fault_.empty() ? "starting" : fault_));
  }
  for (size_t s = 0; s < stages_.size(); ++s) {
    const int64_t need =
        KvBytesAtLength(config_, stages_[s].range.begin, stages_[s].range.end, opt_.precision, tokens);
    if (need > stages_[s].kv_capacity) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "a sequence of ", tokens, " tokens needs ", need, " bytes of KV cache on stage ", s, " (",
          stages_[s].address, ", layers ", stages_[s].range.begin, "-", stages_[s].range.end - 1,
          ") but its capacity is ", stages_[s].kv_capacity, " bytes"));
    }
    r->kv_reserved[s] = need;
  }
  queue_.push_back(std::move(r));
  Admit();
  wake_.notify_all();
  return absl::OkStatus();
}

void Pipeline::Admit() {
  for (const Stage& s : stages_) {
    if (s.draining) return;  // its sequences would have to be replayed elsewhere anyway
  }
  for (auto it = queue_.begin(); it != queue_.end();) {
    Request& r = **it;
    bool fits = true;
    for (size_t s = 0; s < stages_.size(); ++s) {
      fits &= stages_[s].kv_reserved + r.kv_reserved[s] <= stages_[s].kv_capacity;
    }
    if (!fits) {
      ++it;
      continue;
    }
    for (size_t s = 0; s < stages_.size(); ++s) stages_[s].kv_reserved += r.kv_reserved[s];
    r.state = RequestState::kPrefilling;
    r.admitted = Clock::now();
    metrics_.OnAdmitted(r);
    running_.push_back(*it);
    it = queue_.erase(it);
  }
}

bool Pipeline::Drain(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  draining_ = true;
  return updated_.wait_for(lock, absl::ToChronoMilliseconds(timeout),
                           [&] { return running_.empty() && queue_.empty(); });
}

void Pipeline::Cancel(const std::shared_ptr<Request>& r) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (r->done()) return;
    r->cancel_requested = true;
    if (r->state == RequestState::kQueued) {
      queue_.erase(std::remove(queue_.begin(), queue_.end(), r), queue_.end());
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
  if (was_admitted) {
    for (size_t s = 0; s < stages_.size(); ++s) stages_[s].kv_reserved -= r.kv_reserved[s];
    if (r.sent > 0) pending_release_.push_back(r.id);
    running_.erase(std::remove_if(running_.begin(), running_.end(),
                                  [&](const std::shared_ptr<Request>& p) { return p.get() == &r; }),
                   running_.end());
    Admit();
  }
  updated_.notify_all();
}

void Pipeline::OnStepDone(const v1::StepResult& result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    results_.push_back(result);
  }
  wake_.notify_all();
}

bool Pipeline::BuildStep(v1::StepFrame* frame, InFlightStep* step) {
  if (in_flight_.size() >= stages_.size()) return false;
  std::vector<std::shared_ptr<Request>> picked;
  std::vector<int64_t> counts;
  // Decode tokens of every ready sequence (a decode token needs the previous one's sample back).
  for (auto& rp : running_) {
    Request& r = *rp;
    if (r.in_flight > 0 || r.done() || r.state != RequestState::kDecoding || r.sent == r.known()) continue;
    if (static_cast<int>(picked.size()) >= opt_.max_batch) break;
    picked.push_back(rp);
    counts.push_back(r.known() - r.sent);
  }
  // At most one prefill chunk per step, taken round-robin so a long prompt cannot starve short ones.
  // Chunks of one prompt may follow each other down the pipe: chunk c+1 runs on stage 0 while chunk c
  // runs on stage 1 (every stage runs steps in order, so the KV stays consistent).
  std::vector<std::shared_ptr<Request>> prefilling;
  for (auto& rp : running_) {
    if (!rp->done() && rp->state == RequestState::kPrefilling && rp->sent < rp->known()) prefilling.push_back(rp);
  }
  if (!prefilling.empty()) {
    std::shared_ptr<Request> r = prefilling[prefill_rr_++ % prefilling.size()];
    picked.push_back(r);
    counts.push_back(std::min<int64_t>(opt_.prefill_chunk, r->known() - r->sent));
  }
  if (picked.empty() && pending_release_.empty()) return false;

  frame->Clear();
  frame->set_epoch(epoch_);
  frame->set_step_id(next_step_++);
  for (uint64_t id : pending_release_) frame->add_release(id);
  pending_release_.clear();
  step->step_id = frame->step_id();
  step->sent = Clock::now();
  for (size_t i = 0; i < picked.size(); ++i) {
    Request& r = *picked[i];
    const int64_t n = counts[i];
    v1::StepSlice* s = frame->add_slices();
    s->set_seq_id(r.id);
    s->set_pos0(r.sent);
    for (int64_t p = r.sent; p < r.sent + n; ++p) s->add_ids(r.token_at(p));
    const bool reaches_end = r.sent + n == r.known();
    if (r.kind == RequestKind::kGenerate) {
      s->set_sample(reaches_end);
      s->set_top_logprobs(r.top_logprobs);
      if (r.sent == 0) {
        *s->mutable_sampling() = r.sampling_proto;
        // A replayed sequence resumes its RNG where it stopped (one draw per sampled token).
        if (r.sampling.temperature > 0) s->set_rng_skip(static_cast<int64_t>(r.generated.size()));
      }
    } else {
      s->set_score(true);
      s->set_return_logits(r.return_logits);
      s->set_next_id(reaches_end ? -1 : r.token_at(r.sent + n));
    }
    r.sent += n;
    ++r.in_flight;
    step->counts.push_back(n);
  }
  step->requests = std::move(picked);
  return true;
}

void Pipeline::HandleToken(Request& r, const v1::SliceResult& s) {
  const int32_t id = s.token();
  r.generated.push_back(id);
  v1::TokenInfo& ti = r.tokens.emplace_back();
  ti.set_id(id);
  ti.set_logprob(s.logprob());
  *ti.mutable_top() = s.top();
  const auto now = Clock::now();
  metrics_.OnToken(r, now);
  if (!r.first_token) r.first_token = now;
  r.last_token = now;
  const std::string piece = r.detok ? r.detok->Push(id) : std::string();
  const StopChecker::Reason reason = r.stop->Push(id, piece);
  r.pieces.push_back(r.stop->TakeEmittable());
  if (reason == StopChecker::Reason::kNone && r.known() >= config_.max_position_embeddings) {
    Finish(r, "length", absl::OkStatus());
    return;
  }
  if (reason != StopChecker::Reason::kNone) {
    if (reason == StopChecker::Reason::kMaxTokens) {
      r.final_text = r.stop->Flush() + (r.detok ? r.detok->Flush() : std::string());
    }
    Finish(r, reason == StopChecker::Reason::kMaxTokens ? "length" : "stop", absl::OkStatus());
  }
}

void Pipeline::ApplyResult(const v1::StepResult& res) {
  if (res.epoch() != epoch_) return;  // from before a recovery
  auto it = in_flight_.find(res.step_id());
  if (it == in_flight_.end()) return;
  InFlightStep step = std::move(it->second);
  in_flight_.erase(it);
  if (!res.error().empty()) {
    const auto code = static_cast<absl::StatusCode>(res.error_code());
    const std::string msg = absl::StrCat("stage ", res.stage(), ": ", res.error());
    // A request the workers reject would be rejected again on replay: fail it. Anything else is a
    // fault of the pipeline, recovered by replay.
    if (code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kResourceExhausted ||
        code == absl::StatusCode::kOutOfRange) {
      for (auto& r : step.requests) {
        --r->in_flight;
        Finish(*r, "error", absl::Status(code, msg));
      }
    } else {
      fault_ = msg;
    }
    return;
  }
  std::map<uint64_t, const v1::SliceResult*> by_seq;
  for (const auto& s : res.results()) by_seq[s.seq_id()] = &s;
  for (size_t i = 0; i < step.requests.size(); ++i) {
    Request& r = *step.requests[i];
    --r.in_flight;
    if (r.done()) continue;
    r.fed += step.counts[i];
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
  updated_.notify_all();
}

void Pipeline::Recover(std::unique_lock<std::mutex>& lock, const std::string& why) {
  metrics_.OnRecovery();
  ready_ = false;
  std::fprintf(stderr, "layerpipe-coordinator: pipeline fault: %s; recovering\n", why.c_str());
  const absl::Time deadline = absl::Now() + opt_.recovery_deadline;
  bool gave_up = false;
  while (!stopping_) {
    ++epoch_;
    next_step_ = 1;  // step ids count from 1 in every epoch
    in_flight_.clear();
    results_.clear();
    pending_release_.clear();  // a new epoch drops every sequence on every worker
    for (auto& r : running_) {
      r->fed = 0;
      r->sent = 0;
      r->in_flight = 0;
      r->state = RequestState::kPrefilling;  // replay prompt + generated tokens
      r->score_logprobs.clear();
      r->logits.clear();
    }
    const uint64_t epoch = epoch_;
    lock.unlock();
    // A hung worker must not hold recovery past its deadline.
    absl::Status st = AssignAll(epoch, std::max(absl::Seconds(5), deadline - absl::Now()));
    lock.lock();
    if (st.ok()) {
      fault_.clear();
      ready_ = true;
      Admit();  // a drained stage's replacement lets the queue move again
      std::fprintf(stderr, "layerpipe-coordinator: pipeline restored (epoch %llu), replaying %zu sequences\n",
                   static_cast<unsigned long long>(epoch), running_.size());
      return;
    }
    if (!gave_up && absl::Now() > deadline) {
      gave_up = true;
      const std::string msg = absl::StrCat("no worker served the range again within ",
                                           absl::FormatDuration(opt_.recovery_deadline), ": ", st.message());
      auto waiting = running_;
      waiting.insert(waiting.end(), queue_.begin(), queue_.end());
      queue_.clear();
      for (auto& r : waiting) Finish(*r, "error", absl::UnavailableError(msg));
      fault_ = msg;
    }
    lock.unlock();
    absl::SleepFor(absl::Milliseconds(250));
    lock.lock();
  }
}

void Pipeline::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    while (!results_.empty()) {
      v1::StepResult r = std::move(results_.front());
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
    v1::StepFrame frame;
    InFlightStep step;
    if (BuildStep(&frame, &step)) {
      in_flight_[step.step_id] = std::move(step);
      lock.unlock();
      v1::StepAck ack;
      grpc::ClientContext ctx;
      SetDeadline(ctx, absl::Seconds(10));
      grpc::Status s = stages_[0].stub->Step(&ctx, frame, &ack);
      lock.lock();
      if (!s.ok() && fault_.empty()) {
        fault_ = absl::StrCat("stage 0 (", stages_[0].address, ") refused step ", frame.step_id(), ": ",
                              s.error_message());
      }
      continue;
    }
    wake_.wait_for(lock, std::chrono::milliseconds(50));
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
      v1::WorkerStatusRequest req;
      v1::WorkerStatus resp;
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
      if (draining && !stages_[s].draining) {
        std::fprintf(stderr, "layerpipe-coordinator: stage %zu (%s) is draining; admission paused until it is replaced\n",
                     s, stages_[s].address.c_str());
      }
      stages_[s].draining = draining;
    }
  }
}

v1::ClusterStatusResponse Pipeline::Status() {
  v1::ClusterStatusResponse out;
  std::vector<std::pair<std::string, LayerRange>> stages;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Stage& s : stages_) stages.push_back({s.address, s.range});
    out.set_running_sequences(static_cast<int>(running_.size()));
    out.set_queued_requests(static_cast<int>(queue_.size()));
  }
  out.set_num_layers(config_.num_layers);
  out.set_model(opt_.model_dir);
  out.set_ready(ready_);
  for (size_t s = 0; s < stages.size(); ++s) {
    v1::StageStatus* ss = out.add_stages();
    ss->set_stage(static_cast<int>(s));
    ss->set_address(stages[s].first);
    ss->set_layer_begin(stages[s].second.begin);
    ss->set_layer_end(stages[s].second.end);
    v1::WorkerStatusRequest req;
    v1::WorkerStatus resp;
    grpc::ClientContext ctx;
    SetDeadline(ctx, absl::Seconds(2));
    if (stages_[s].stub->Status(&ctx, req, &resp).ok()) {
      ss->set_health(resp.assigned() ? "serving" : "loading");
      ss->set_kv_bytes_used(resp.kv_bytes_used());
      ss->set_kv_bytes_free(resp.kv_capacity_bytes() - resp.kv_bytes_used());
      ss->set_sequences(resp.sequences());
      ss->set_compute_ms_total(resp.compute_ms_total());
    } else {
      ss->set_health("unreachable");
    }
  }
  return out;
}

}  // namespace layerpipe
