#include "coordinator/api_service.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_status.h"
#include "proto/sampling_params.h"
#include "engine/tokenizer/chat_format.h"

namespace layerpipe {
namespace {

using Clock = std::chrono::steady_clock;

// Full logits are returned only while they stay a reasonable message.
constexpr int64_t kMaxLogitsBytes = int64_t{256} << 20;
constexpr int kMaxTopLogprobs = 20;

grpc::Status Invalid(const std::string& msg) { return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, msg); }

// Input bytes one token can stand for at most: its spelling's length (byte-fallback tokens stand for one).
int64_t MaxTokenBytes(const Tokenizer* tokenizer) {
  if (tokenizer == nullptr) return 1;
  int64_t longest = 1;
  for (int32_t id = 0; id < tokenizer->vocab_size(); ++id) {
    longest = std::max<int64_t>(longest, static_cast<int64_t>(tokenizer->IdToToken(id).size()));
  }
  return longest;
}

// Job ids are 128 random bits: holding one is the only way to name a job, so they cannot be guessed
// or enumerated.
std::string NewJobId() {
  std::random_device rd;
  uint64_t hi = (uint64_t{rd()} << 32) | rd(), lo = (uint64_t{rd()} << 32) | rd();
  return absl::StrFormat("job-%016x%016x", hi, lo);
}

double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

void FillTimings(const Request& r, const RequestView& v, v1::Timings* t) {
  const Clock::time_point end = v.finished.value_or(Clock::now());
  t->set_queue_ms(Ms(r.created, v.admitted.value_or(end)));
  t->set_total_ms(Ms(r.created, end));
  if (v.first_token) {
    t->set_time_to_first_token_ms(Ms(r.created, *v.first_token));
    const double decode_s = Ms(*v.first_token, end) / 1e3;
    const size_t n = v.tokens.size();
    if (n > 1 && decode_s > 0) t->set_decode_tokens_per_s((n - 1) / decode_s);
  }
}

v1::JobState JobStateOf(const RequestView& v) {
  switch (v.state) {
    case RequestState::kQueued: return v1::JOB_QUEUED;
    case RequestState::kPrefilling: return v.tokens.empty() ? v1::JOB_PREFILLING : v1::JOB_DECODING;
    case RequestState::kDecoding: return v1::JOB_DECODING;
    case RequestState::kDone:
      if (!v.error.ok()) return v1::JOB_FAILED;
      return v.finish_reason == "cancelled" ? v1::JOB_CANCELLED : v1::JOB_SUCCEEDED;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

}  // namespace

LayerPipeService::LayerPipeService(const ModelConfig& config, const Tokenizer* tokenizer,
                                   std::vector<int32_t> default_stop_ids, Pipeline* pipeline,
                                   std::shared_ptr<ClientGate> gate)
    : config_(config),
      tokenizer_(tokenizer),
      max_token_bytes_(MaxTokenBytes(tokenizer)),
      default_stop_ids_(std::move(default_stop_ids)),
      pipeline_(pipeline),
      gate_(std::move(gate)) {}

absl::Status LayerPipeService::CheckTextLength(size_t bytes, const char* what) const {
  // No token stands for more input bytes than its spelling has, so a longer text cannot fit the
  // context whatever it says: refused before the tokenizer spends time (and memory) on it.
  const int64_t at_least = static_cast<int64_t>(bytes) / std::max<int64_t>(max_token_bytes_, 1);
  if (at_least > config_.max_position_embeddings) {
    return absl::OutOfRangeError(absl::StrCat("the ", what, " of ", bytes, " bytes is at least ", at_least,
                                              " tokens, beyond the model's context of ",
                                              config_.max_position_embeddings));
  }
  return absl::OkStatus();
}

int64_t LayerPipeService::MaxRequestBytes() const {
  // The longest text that may fit, or ids for the whole context (5 bytes each at most), and room for
  // the other fields (stop strings, sampling).
  const int64_t context = config_.max_position_embeddings;
  return std::max<int64_t>(context * std::max<int64_t>(max_token_bytes_, 1), context * 5) + (int64_t{1} << 20);
}

absl::StatusOr<ClientGate::Pass> LayerPipeService::Admit(const grpc::ServerContext& ctx) {
  if (!gate_) return ClientGate::Pass();
  return gate_->Admit(ctx);
}

absl::StatusOr<std::vector<int32_t>> LayerPipeService::CheckIds(
    const google::protobuf::RepeatedField<int32_t>& ids) const {
  if (ids.empty()) return absl::InvalidArgumentError("the prompt is empty");
  for (int i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", ids[i], " at index ", i,
                                                     " is outside the vocabulary [0, ", config_.vocab_size, ")"));
    }
  }
  return std::vector<int32_t>(ids.begin(), ids.end());
}

absl::StatusOr<std::shared_ptr<Request>> LayerPipeService::BuildGenerate(const v1::GenerateRequest& req) {
  auto r = std::make_shared<Request>();
  r->id = next_id_++;
  switch (req.input_case()) {
    case v1::GenerateRequest::kPrompt:
      if (tokenizer_ == nullptr) return absl::FailedPreconditionError("the coordinator has no tokenizer; send ids");
      if (req.prompt().empty()) return absl::InvalidArgumentError("the prompt is empty");
      if (auto st = CheckTextLength(req.prompt().size() + (req.chat() ? req.system().size() : 0), "prompt"); !st.ok()) return st;
      r->prompt = req.chat() ? BuildChatPrompt(*tokenizer_, req.prompt(), req.system())
                             : tokenizer_->Encode(req.prompt(), /*add_bos=*/true);
      break;
    case v1::GenerateRequest::kIds: {
      if (req.chat()) return absl::InvalidArgumentError("chat needs a text prompt, not ids");
      auto ids = CheckIds(req.ids().ids());
      if (!ids.ok()) return ids.status();
      r->prompt = *std::move(ids);
      break;
    }
    default:
      return absl::InvalidArgumentError("the request has neither a prompt nor ids");
  }
  if (req.max_new_tokens() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_new_tokens must be positive, got ", req.max_new_tokens()));
  }
  if (static_cast<int64_t>(r->prompt.size()) + req.max_new_tokens() > config_.max_position_embeddings) {
    return absl::OutOfRangeError(absl::StrCat("a prompt of ", r->prompt.size(), " tokens plus ", req.max_new_tokens(),
                                              " new tokens exceeds the model's context of ",
                                              config_.max_position_embeddings));
  }
  if (req.top_logprobs() < 0 || req.top_logprobs() > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("top_logprobs must be in [0, ", kMaxTopLogprobs, "]"));
  }
  const v1::SamplingParams& sp = req.sampling();
  const SamplingParams p = ToSamplingParams(sp);
  if (auto st = ValidateSamplingParams(p); !st.ok()) return st;
  r->sampling = p;
  r->sampling_proto = sp;
  r->top_logprobs = req.top_logprobs();
  r->max_new_tokens = req.max_new_tokens();
  StopConfig stop;
  stop.max_new_tokens = req.max_new_tokens();
  stop.stop_ids = req.stop_ids().empty() ? default_stop_ids_
                                         : std::vector<int32_t>(req.stop_ids().begin(), req.stop_ids().end());
  for (const std::string& s : req.stop()) stop.stop_strings.push_back(s);
  if (!stop.stop_strings.empty() && tokenizer_ == nullptr) {
    return absl::FailedPreconditionError("stop strings need the tokenizer, which the coordinator lacks");
  }
  r->text.emplace(tokenizer_, std::move(stop));
  return r;
}

grpc::Status LayerPipeService::Stream(grpc::ServerContext* ctx, const std::shared_ptr<Request>& r, int64_t offset,
                                      bool owner, grpc::ServerWriter<v1::GenerateResponse>* writer) {
  int64_t sent = offset;
  const auto prompt_tokens = static_cast<int>(r->prompt.size());
  for (;;) {
    v1::GenerateResponse msg;
    bool done;
    absl::Status error;
    r->events.WaitThen(
        [&](const RequestView& v) { return static_cast<int64_t>(v.tokens.size()) > sent || v.done(); },
        absl::Milliseconds(100), [&](const RequestView& v) {
          const int64_t n = static_cast<int64_t>(v.tokens.size());
          msg.set_offset(sent);
          std::string text;
          for (int64_t i = sent; i < n; ++i) {
            *msg.add_tokens() = v.tokens[i];
            text += v.pieces[i];
          }
          sent = std::max(sent, n);
          done = v.done();
          error = v.error;
          if (done && error.ok()) {
            text += v.final_text;
            msg.set_finish_reason(v.finish_reason);
            msg.mutable_usage()->set_prompt_tokens(prompt_tokens);
            msg.mutable_usage()->set_completion_tokens(static_cast<int>(n));
            FillTimings(*r, v, msg.mutable_timings());
          }
          msg.set_text(text);
        });
    if (ctx->IsCancelled()) {
      if (owner) pipeline_->Cancel(r);
      return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
    }
    if (msg.tokens_size() > 0 || !msg.text().empty() || (done && error.ok())) {
      if (!writer->Write(msg)) {
        if (owner) pipeline_->Cancel(r);
        return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      }
    }
    if (done) return ToGrpc(error);
  }
}

grpc::Status LayerPipeService::Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                                        grpc::ServerWriter<v1::GenerateResponse>* writer) {
  auto pass = Admit(*ctx);
  if (!pass.ok()) return ToGrpc(pass.status());
  auto r = BuildGenerate(*req);
  if (!r.ok()) return ToGrpc(r.status());
  if (auto st = pipeline_->Submit(*r); !st.ok()) return ToGrpc(st);
  return Stream(ctx, *r, 0, /*owner=*/true, writer);
}

grpc::Status LayerPipeService::Score(grpc::ServerContext* ctx, const v1::ScoreRequest* req, v1::ScoreResponse* resp) {
  auto pass = Admit(*ctx);
  if (!pass.ok()) return ToGrpc(pass.status());
  auto r = std::make_shared<Request>();
  r->id = next_id_++;
  r->kind = RequestKind::kScore;
  if (req->input_case() == v1::ScoreRequest::kText) {
    if (tokenizer_ == nullptr) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no tokenizer; send ids");
    if (req->text().empty()) return Invalid("the text is empty");
    if (auto st = CheckTextLength(req->text().size(), "text"); !st.ok()) return ToGrpc(st);
    r->prompt = tokenizer_->Encode(req->text(), /*add_bos=*/true);
  } else if (req->input_case() == v1::ScoreRequest::kIds) {
    auto ids = CheckIds(req->ids().ids());
    if (!ids.ok()) return ToGrpc(ids.status());
    r->prompt = *std::move(ids);
  } else {
    return Invalid("the request has neither text nor ids");
  }
  const int64_t n = static_cast<int64_t>(r->prompt.size());
  if (n > config_.max_position_embeddings) {
    return grpc::Status(grpc::StatusCode::OUT_OF_RANGE,
                        absl::StrCat(n, " tokens exceed the model's context of ", config_.max_position_embeddings));
  }
  r->return_logits = req->return_logits();
  if (r->return_logits && n * config_.vocab_size * 4 > kMaxLogitsBytes) {
    return Invalid(absl::StrCat("return_logits is limited to ", kMaxLogitsBytes / (config_.vocab_size * 4),
                                " tokens at this vocabulary; ask for logprobs instead"));
  }
  if (auto st = pipeline_->Submit(r); !st.ok()) return ToGrpc(st);
  grpc::Status out;
  auto done = [](const RequestView& v) { return v.done(); };
  while (!r->events.WaitThen(done, absl::Milliseconds(100), [](const RequestView&) {})) {
    if (ctx->IsCancelled()) {
      pipeline_->Cancel(r);
      return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
    }
  }
  r->events.Read([&](const RequestView& v) {
    if (!v.error.ok()) {
      out = ToGrpc(v.error);
    } else if (v.finish_reason == "cancelled") {
      out = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    } else {
      for (int32_t id : r->prompt) resp->add_ids(id);
      resp->add_logprobs(0.0f);
      for (float lp : v.score_logprobs) resp->add_logprobs(lp);
      *resp->mutable_logits() = {v.logits.begin(), v.logits.end()};
      resp->set_vocab_size(config_.vocab_size);
    }
  });
  return out;
}

grpc::Status LayerPipeService::SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                                         v1::SubmitJobResponse* resp) {
  auto pass = Admit(*ctx);
  if (!pass.ok()) return ToGrpc(pass.status());
  auto r = BuildGenerate(req->request());
  if (!r.ok()) return ToGrpc(r.status());
  (*r)->job_id = NewJobId();
  (*r)->owner = OwnerOf(*pass);
  if (auto st = pipeline_->Submit(*r); !st.ok()) return ToGrpc(st);
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    jobs_[(*r)->job_id] = *r;
  }
  resp->set_job_id((*r)->job_id);
  return grpc::Status::OK;
}

std::string LayerPipeService::OwnerOf(const ClientGate::Pass& pass) const {
  return gate_ && gate_->authenticates() ? pass.client() : std::string();
}

bool LayerPipeService::MaySee(const Request& job, const ClientGate::Pass& pass) const {
  return job.owner.empty() || job.owner == pass.client() || (gate_ && gate_->IsAdmin(pass.client()));
}

std::shared_ptr<Request> LayerPipeService::FindJob(const std::string& id, const ClientGate::Pass& pass) {
  std::lock_guard<std::mutex> lock(jobs_mu_);
  auto it = jobs_.find(id);
  // Another client's job is as unknown as a job that never was: its id tells nothing.
  return it == jobs_.end() || !MaySee(*it->second, pass) ? nullptr : it->second;
}

void LayerPipeService::FillJobInfo(const Request& r, bool with_tokens, v1::JobInfo* info) {
  info->set_job_id(r.job_id);
  info->set_prompt_tokens(static_cast<int64_t>(r.prompt.size()));
  r.events.Read([&](const RequestView& v) {
    info->set_state(JobStateOf(v));
    info->set_prefilled_tokens(v.prefilled);
    info->set_generated_tokens(static_cast<int64_t>(v.tokens.size()));
    info->set_finish_reason(v.finish_reason);
    if (!v.error.ok()) info->set_error(std::string(v.error.message()));
    if (with_tokens) {
      std::string text;
      for (size_t i = 0; i < v.tokens.size(); ++i) {
        info->add_ids(v.tokens[i].id());
        text += v.pieces[i];
      }
      info->set_text(text + v.final_text);
    }
  });
}

grpc::Status LayerPipeService::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req, v1::JobInfo* resp) {
  auto pass = Admit(*ctx);
  if (!pass.ok()) return ToGrpc(pass.status());
  auto r = FindJob(req->job_id(), *pass);
  if (!r) return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("unknown job id \"", req->job_id(), "\""));
  FillJobInfo(*r, true, resp);
  return grpc::Status::OK;
}

grpc::Status LayerPipeService::StreamJob(grpc::ServerContext* ctx, const v1::StreamJobRequest* req,
                                         grpc::ServerWriter<v1::GenerateResponse>* writer) {
  auto pass = Admit(*ctx);
  if (!pass.ok()) return ToGrpc(pass.status());
  auto r = FindJob(req->job_id(), *pass);
  if (!r) return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("unknown job id \"", req->job_id(), "\""));
  if (req->offset() < 0) return Invalid("offset must be >= 0");
  // An offset past what the job has (when done) or can ever have (while running) would wait for
  // nothing: say so instead of holding the stream open.
  int64_t have = 0;
  bool done = false;
  r->events.Read([&](const RequestView& v) {
    have = static_cast<int64_t>(v.tokens.size());
    done = v.done();
  });
  const int64_t limit = done ? have : r->max_new_tokens;
  if (req->offset() > limit) {
    return grpc::Status(grpc::StatusCode::OUT_OF_RANGE,
                        absl::StrCat("offset ", req->offset(), " is past the end of job \"", r->job_id, "\", which ",
                                     done ? "ended with " : "can produce at most ", limit, " tokens"));
  }
  // A job outlives its followers: a disconnect does not cancel it.
  return Stream(ctx, r, req->offset(), /*owner=*/false, writer);
}

grpc::Status LayerPipeService::CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req, v1::JobInfo* resp) {
  auto pass = Admit(*ctx);
  if (!pass.ok()) return ToGrpc(pass.status());
  auto r = FindJob(req->job_id(), *pass);
  if (!r) return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("unknown job id \"", req->job_id(), "\""));
  pipeline_->Cancel(r);
  FillJobInfo(*r, false, resp);
  return grpc::Status::OK;
}

grpc::Status LayerPipeService::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest*,
                                        v1::ListJobsResponse* resp) {
  auto pass = Admit(*ctx);
  if (!pass.ok()) return ToGrpc(pass.status());
  std::vector<std::shared_ptr<Request>> jobs;
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    for (auto& [id, r] : jobs_) {
      if (MaySee(*r, *pass)) jobs.push_back(r);
    }
  }
  // In submission order (the ids themselves are random).
  std::sort(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) { return a->id < b->id; });
  for (auto& r : jobs) FillJobInfo(*r, false, resp->add_jobs());
  return grpc::Status::OK;
}

grpc::Status LayerPipeService::Tokenize(grpc::ServerContext* ctx, const v1::TokenizeRequest* req,
                                        v1::TokenizeResponse* resp) {
  auto pass = Admit(*ctx);
  if (!pass.ok()) return ToGrpc(pass.status());
  if (tokenizer_ == nullptr) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "the coordinator has no tokenizer");
  if (auto st = CheckTextLength(req->text().size(), "text"); !st.ok()) return ToGrpc(st);
  const std::vector<int32_t> ids =
      req->chat() ? BuildChatPrompt(*tokenizer_, req->text()) : tokenizer_->Encode(req->text(), req->add_bos());
  *resp->mutable_ids() = {ids.begin(), ids.end()};
  return grpc::Status::OK;
}

grpc::Status LayerPipeService::Detokenize(grpc::ServerContext* ctx, const v1::DetokenizeRequest* req,
                                          v1::DetokenizeResponse* resp) {
  auto pass = Admit(*ctx);
  if (!pass.ok()) return ToGrpc(pass.status());
  if (tokenizer_ == nullptr) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "the coordinator has no tokenizer");
  for (int i = 0; i < req->ids_size(); ++i) {
    // The model's vocabulary, as Generate and Score check it (the tokenizer knows one id more).
    if (req->ids(i) < 0 || req->ids(i) >= config_.vocab_size) {
      return Invalid(absl::StrCat("token id ", req->ids(i), " at index ", i, " is outside the vocabulary [0, ",
                                  config_.vocab_size, ")"));
    }
  }
  resp->set_text(tokenizer_->Decode({req->ids().data(), static_cast<size_t>(req->ids_size())},
                                    req->skip_special_tokens()));
  return grpc::Status::OK;
}

grpc::Status LayerPipeService::ClusterStatus(grpc::ServerContext* ctx, const v1::ClusterStatusRequest*,
                                             v1::ClusterStatusResponse* resp) {
  auto pass = Admit(*ctx);
  if (!pass.ok()) return ToGrpc(pass.status());
  *resp = pipeline_->Status();
  return grpc::Status::OK;
}

}  // namespace layerpipe
