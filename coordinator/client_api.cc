#include "coordinator/client_api.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "engine/tokenizer/chat_format.h"
#include "proto/sampling_params.h"

namespace layerpipe {
namespace {

using Clock = std::chrono::steady_clock;

// Full logits are returned only while they stay a reasonable message.
constexpr int64_t kMaxLogitsBytes = int64_t{256} << 20;
constexpr int kMaxTopLogprobs = 20;
constexpr absl::Duration kPoll = absl::Milliseconds(100);
// Generated tokens of a request that does not say (OpenAI's max_tokens left out), below --max-new-tokens.
constexpr int64_t kDefaultMaxNewTokens = 4096;

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
std::string RandomJobId() {
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

absl::Status ClientGone() { return absl::CancelledError("the client went away"); }

}  // namespace

ClientApi::ClientApi(const ModelConfig& config, const Tokenizer* tokenizer, std::vector<int32_t> default_stop_ids,
                     Pipeline* pipeline, std::shared_ptr<ClientGate> gate, ClientLimits limits)
    : config_(config),
      max_model_len_(limits.max_model_len > 0 ? std::min(limits.max_model_len, config.max_position_embeddings)
                                              : config.max_position_embeddings),
      max_new_tokens_(limits.max_new_tokens),
      tokenizer_(tokenizer),
      max_token_bytes_(MaxTokenBytes(tokenizer)),
      default_stop_ids_(std::move(default_stop_ids)),
      pipeline_(pipeline),
      gate_(std::move(gate)) {}

absl::Status ClientApi::CheckTextLength(size_t bytes, const char* what) const {
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

int64_t ClientApi::MaxRequestBytes() const {
  // The longest text that may fit, or ids for the whole context (5 bytes each at most), and room for
  // the other fields (stop strings, sampling).
  const int64_t context = config_.max_position_embeddings;
  return std::max<int64_t>(context * std::max<int64_t>(max_token_bytes_, 1), context * 5) + kMaxAttachmentBytes +
         (int64_t{1} << 20);
}

absl::StatusOr<ClientGate::Pass> ClientApi::Admit(absl::string_view authorization, absl::string_view peer) {
  if (!gate_) return ClientGate::Pass();
  auto pass = gate_->Admit(authorization, peer);
  if (!pass.ok()) {
    // The gate's RESOURCE_EXHAUSTED is a client over its limit.
    pipeline_->OnRefused(absl::IsResourceExhausted(pass.status()) ? "rate_limited" : RefusalReason(pass.status()));
  }
  return pass;
}

absl::Status ClientApi::Refused(absl::Status status) const {
  pipeline_->OnRefused(RefusalReason(status));
  return status;
}

absl::StatusOr<std::shared_ptr<Request>> ClientApi::BuildGenerate(const v1::GenerateRequest& req,
                                                                  bool fill_max_new_tokens) {
  auto r = Build(req, fill_max_new_tokens);
  if (!r.ok()) return Refused(r.status());
  return r;
}

absl::Status ClientApi::CheckIds(const int32_t* ids, size_t n) const {
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", ids[i], " at index ", i,
                                                     " is outside the vocabulary [0, ", config_.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const PromptMedia>> ClientApi::DecodeFiles(const std::vector<MediaFile>& files) const {
  int64_t bytes = 0;
  for (const MediaFile& f : files) bytes += static_cast<int64_t>(f.bytes.size());
  if (bytes > kMaxAttachmentBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the attachments come to ", bytes, " bytes, over the limit of ",
                                                   kMaxAttachmentBytes, " per request"));
  }
  auto media = PromptMedia::Decode(files, config_);
  if (!media.ok()) return media.status();
  return std::make_shared<const PromptMedia>(*std::move(media));
}

absl::StatusOr<std::shared_ptr<const PromptMedia>> ClientApi::DecodeAttachments(
    const google::protobuf::RepeatedPtrField<v1::Attachment>& attachments) const {
  std::vector<MediaFile> files;
  for (int i = 0; i < attachments.size(); ++i) {
    const v1::Attachment& a = attachments[i];
    if (a.data_case() == v1::Attachment::DATA_NOT_SET) {
      return absl::InvalidArgumentError(absl::StrCat("attachments[", i, "] has neither image nor audio"));
    }
    const bool image = a.data_case() == v1::Attachment::kImage;
    files.push_back({image ? SoftSpan::Kind::kImage : SoftSpan::Kind::kAudio, image ? a.image() : a.audio(),
                     absl::StrCat("attachments[", i, "]")});
  }
  return DecodeFiles(files);
}

absl::StatusOr<std::shared_ptr<const PromptMedia>> ClientApi::DecodeMedia(const v1::GenerateRequest& req) const {
  if (req.input_case() != v1::GenerateRequest::kMessages || !req.attachments().empty()) {
    for (const v1::ChatMessage& m : req.messages().messages()) {
      for (const v1::ContentPart& p : m.parts()) {
        if (p.part_case() == v1::ContentPart::kImage || p.part_case() == v1::ContentPart::kAudio) {
          // Placeholders in the texts and parts of their own would take attachments in two orders.
          return absl::InvalidArgumentError("give images and audio either as attachments or in the messages' parts, not both");
        }
      }
    }
    return DecodeAttachments(req.attachments());
  }
  std::vector<MediaFile> files;
  for (int i = 0; i < req.messages().messages_size(); ++i) {
    const v1::ChatMessage& m = req.messages().messages(i);
    for (int j = 0; j < m.parts_size(); ++j) {
      const v1::ContentPart& p = m.parts(j);
      if (p.part_case() == v1::ContentPart::kImage || p.part_case() == v1::ContentPart::kAudio) {
        const bool image = p.part_case() == v1::ContentPart::kImage;
        files.push_back({image ? SoftSpan::Kind::kImage : SoftSpan::Kind::kAudio, image ? p.image() : p.audio(),
                         absl::StrCat("messages[", i, "].parts[", j, "]")});
      }
    }
  }
  return DecodeFiles(files);
}

absl::Status ClientApi::AttachMedia(std::shared_ptr<const PromptMedia> media, Request* r) const {
  auto spans = media->Spans(r->prompt);
  if (!spans.ok()) return spans.status();
  r->soft = *std::move(spans);
  if (!media->empty()) r->media = std::move(media);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> ClientApi::PromptOf(const v1::GenerateRequest& req, SoftTokenExpander* soft) const {
  switch (req.input_case()) {
    case v1::GenerateRequest::kPrompt:
      if (tokenizer_ == nullptr) return absl::FailedPreconditionError("the coordinator has no tokenizer; send ids");
      if (req.prompt().empty()) return absl::InvalidArgumentError("the prompt is empty");
      if (auto st = CheckTextLength(req.prompt().size() + (req.chat() ? req.system().size() : 0), "prompt"); !st.ok()) {
        return st;
      }
      return req.chat() ? BuildChatPrompt(*tokenizer_, req.prompt(), req.system(), soft)
                        : soft->EncodePrompt(*tokenizer_, req.prompt(), /*add_bos=*/true);
    case v1::GenerateRequest::kMessages: {
      if (tokenizer_ == nullptr) return absl::FailedPreconditionError("the coordinator has no tokenizer; send ids");
      if (!req.system().empty()) {
        return absl::InvalidArgumentError("with messages, the system text is a message of role \"system\"");
      }
      size_t bytes = 0;
      std::vector<ChatMessage> messages;
      for (const v1::ChatMessage& m : req.messages().messages()) {
        // The parts follow the content, written as the chat template writes them.
        std::string content = m.content();
        for (const v1::ContentPart& p : m.parts()) {
          switch (p.part_case()) {
            case v1::ContentPart::kText: content += p.text(); break;
            case v1::ContentPart::kImage: content += kChatImageItem; break;
            case v1::ContentPart::kAudio: content += kChatAudioItem; break;
            default: return absl::InvalidArgumentError("a content part has neither text, image nor audio");
          }
        }
        bytes += content.size();
        messages.push_back({m.role(), std::move(content)});
      }
      if (auto st = CheckTextLength(bytes, "conversation"); !st.ok()) return st;
      return BuildChatConversation(*tokenizer_, messages, soft);
    }
    case v1::GenerateRequest::kIds: {
      if (req.chat()) return absl::InvalidArgumentError("chat needs a text prompt, not ids");
      if (req.ids().ids().empty()) return absl::InvalidArgumentError("the prompt is empty");
      if (auto st = CheckIds(req.ids().ids().data(), req.ids().ids_size()); !st.ok()) return st;
      return std::vector<int32_t>(req.ids().ids().begin(), req.ids().ids().end());
    }
    default:
      return absl::InvalidArgumentError("the request has neither a prompt, messages nor ids");
  }
}

absl::StatusOr<std::shared_ptr<Request>> ClientApi::Build(const v1::GenerateRequest& req, bool fill_max_new_tokens) {
  auto r = std::make_shared<Request>();
  r->id = next_id_++;
  auto media = DecodeMedia(req);
  if (!media.ok()) return media.status();
  SoftTokenExpander soft = (*media)->Expander();
  auto prompt = PromptOf(req, &soft);
  if (!prompt.ok()) return prompt.status();
  r->prompt = *std::move(prompt);
  if (req.input_case() != v1::GenerateRequest::kIds) {
    if (auto st = soft.Finish(); !st.ok()) return st;
  }
  if (auto st = AttachMedia(*std::move(media), r.get()); !st.ok()) return st;
  // Text too: a tokenizer may know more ids than the model embeds (a test vocabulary over a small
  // model), and no stage could run such a prompt.
  if (auto st = CheckIds(r->prompt.data(), r->prompt.size()); !st.ok()) return st;
  const int64_t prompt_tokens = static_cast<int64_t>(r->prompt.size());
  const std::string context = max_model_len_ == config_.max_position_embeddings
                                  ? absl::StrCat("the model's context of ", max_model_len_)
                                  : absl::StrCat("this server's limit of ", max_model_len_, " tokens");
  if (prompt_tokens >= max_model_len_) {
    return absl::OutOfRangeError(absl::StrCat("a prompt of ", prompt_tokens, " tokens leaves no room to generate in ", context));
  }
  int64_t max_new = req.max_new_tokens();
  if (max_new == 0 && fill_max_new_tokens) {
    // The KV cache is reserved for a request's whole budget: "the rest of the context" would reserve
    // the whole context for every request that leaves max_tokens out.
    max_new = std::min<int64_t>(max_model_len_ - prompt_tokens, max_new_tokens_ > 0 ? max_new_tokens_ : kDefaultMaxNewTokens);
  }
  if (max_new <= 0) return absl::InvalidArgumentError(absl::StrCat("max_new_tokens must be positive, got ", max_new));
  if (max_new_tokens_ > 0 && max_new > max_new_tokens_) {
    return absl::InvalidArgumentError(absl::StrCat("max_new_tokens of ", max_new, " is above this server's limit of ",
                                                   max_new_tokens_));
  }
  if (prompt_tokens + max_new > max_model_len_) {
    return absl::OutOfRangeError(absl::StrCat("a prompt of ", prompt_tokens, " tokens plus ", max_new,
                                              " new tokens exceeds ", context));
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
  r->max_new_tokens = static_cast<int>(max_new);
  StopConfig stop;
  stop.max_new_tokens = static_cast<int>(max_new);
  stop.stop_ids = req.stop_ids().empty() ? default_stop_ids_
                                         : std::vector<int32_t>(req.stop_ids().begin(), req.stop_ids().end());
  for (const std::string& s : req.stop()) stop.stop_strings.push_back(s);
  if (!stop.stop_strings.empty() && tokenizer_ == nullptr) {
    return absl::FailedPreconditionError("stop strings need the tokenizer, which the coordinator lacks");
  }
  r->text.emplace(tokenizer_, std::move(stop));
  return r;
}

absl::StatusOr<std::shared_ptr<Request>> ClientApi::BuildScore(const v1::ScoreRequest& req) {
  auto r = BuildScoreRequest(req);
  if (!r.ok()) return Refused(r.status());
  return r;
}

absl::StatusOr<std::shared_ptr<Request>> ClientApi::BuildScoreRequest(const v1::ScoreRequest& req) {
  auto r = std::make_shared<Request>();
  r->id = next_id_++;
  r->kind = RequestKind::kScore;
  auto media = DecodeAttachments(req.attachments());
  if (!media.ok()) return media.status();
  if (req.input_case() == v1::ScoreRequest::kText) {
    if (tokenizer_ == nullptr) return absl::FailedPreconditionError("no tokenizer; send ids");
    if (req.text().empty()) return absl::InvalidArgumentError("the text is empty");
    if (auto st = CheckTextLength(req.text().size(), "text"); !st.ok()) return st;
    SoftTokenExpander soft = (*media)->Expander();
    r->prompt = soft.EncodePrompt(*tokenizer_, req.text(), /*add_bos=*/true);
    if (auto st = soft.Finish(); !st.ok()) return st;
    if (auto st = CheckIds(r->prompt.data(), r->prompt.size()); !st.ok()) return st;
  } else if (req.input_case() == v1::ScoreRequest::kIds) {
    if (req.ids().ids().empty()) return absl::InvalidArgumentError("the prompt is empty");
    if (auto st = CheckIds(req.ids().ids().data(), req.ids().ids_size()); !st.ok()) return st;
    r->prompt.assign(req.ids().ids().begin(), req.ids().ids().end());
  } else {
    return absl::InvalidArgumentError("the request has neither text nor ids");
  }
  if (auto st = AttachMedia(*std::move(media), r.get()); !st.ok()) return st;
  const int64_t n = static_cast<int64_t>(r->prompt.size());
  if (n > max_model_len_) {
    return absl::OutOfRangeError(absl::StrCat(n, " tokens exceed ", max_model_len_ == config_.max_position_embeddings ? "the model's context" : "this server's limit", " of ", max_model_len_));
  }
  r->return_logits = req.return_logits();
  if (r->return_logits && n * config_.vocab_size * 4 > kMaxLogitsBytes) {
    return absl::InvalidArgumentError(absl::StrCat("return_logits is limited to ", kMaxLogitsBytes / (config_.vocab_size * 4),
                                                   " tokens at this vocabulary; ask for logprobs instead"));
  }
  return r;
}

absl::Status ClientApi::Follow(const std::shared_ptr<Request>& r, int64_t offset, bool owner, const Idle& idle,
                               const Writer& write) {
  int64_t sent = offset;
  const auto prompt_tokens = static_cast<int>(r->prompt.size());
  for (;;) {
    v1::GenerateResponse msg;
    bool done;
    absl::Status error;
    r->events.WaitThen(
        [&](const RequestView& v) { return static_cast<int64_t>(v.tokens.size()) > sent || v.done(); }, kPoll,
        [&](const RequestView& v) {
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
            msg.mutable_usage()->set_cached_prompt_tokens(static_cast<int>(v.cached_tokens));
            FillTimings(*r, v, msg.mutable_timings());
          }
          msg.set_text(text);
        });
    const bool has_news = msg.tokens_size() > 0 || !msg.text().empty() || (done && error.ok());
    if ((has_news && !write(msg)) || (!has_news && !done && !idle())) {
      if (owner) pipeline_->Cancel(r);
      return ClientGone();
    }
    if (done) return error;
  }
}

absl::StatusOr<v1::ScoreResponse> ClientApi::Score(const std::shared_ptr<Request>& r, const Idle& idle) {
  if (auto st = pipeline_->Submit(r); !st.ok()) return st;
  auto done = [](const RequestView& v) { return v.done(); };
  while (!r->events.WaitThen(done, kPoll, [](const RequestView&) {})) {
    if (!idle()) {
      pipeline_->Cancel(r);
      return ClientGone();
    }
  }
  absl::StatusOr<v1::ScoreResponse> out;
  r->events.Read([&](const RequestView& v) {
    if (!v.error.ok()) {
      out = v.error;
    } else if (v.finish_reason == "cancelled") {
      out = absl::CancelledError("cancelled");
    } else {
      v1::ScoreResponse resp;
      for (int32_t id : r->prompt) resp.add_ids(id);
      resp.add_logprobs(0.0f);
      for (float lp : v.score_logprobs) resp.add_logprobs(lp);
      *resp.mutable_logits() = {v.logits.begin(), v.logits.end()};
      resp.set_vocab_size(config_.vocab_size);
      out = std::move(resp);
    }
  });
  return out;
}

absl::StatusOr<std::string> ClientApi::NewJobId() const {
  for (;;) {
    std::string id = RandomJobId();
    // Never an id a job had before, even one long deleted (a collision of 128 random bits is
    // unlikely, but a client's old id must never name another client's new job).
    if (journal_ == nullptr || journal_->store() == nullptr) return id;
    auto issued = journal_->store()->WasIssued(id);
    if (!issued.ok()) return issued.status();
    if (!*issued) return id;
  }
}

absl::StatusOr<std::shared_ptr<Request>> ClientApi::SubmitJob(const v1::GenerateRequest& req,
                                                              const ClientGate::Pass& pass,
                                                              bool fill_max_new_tokens) {
  auto r = BuildGenerate(req, fill_max_new_tokens);
  if (!r.ok()) return r.status();
  auto id = NewJobId();
  if (!id.ok()) return id.status();
  (*r)->job_id = *std::move(id);
  (*r)->owner = OwnerOf(pass);
  if (journal_) journal_->Watch(**r);
  if (auto st = pipeline_->Submit(*r); !st.ok()) return st;
  if (journal_) {
    // The request as it runs (its token budget decided), so that a restart rebuilds the same job.
    v1::GenerateRequest effective = req;
    effective.set_max_new_tokens((*r)->max_new_tokens);
    if (auto st = journal_->Add(*r, effective.SerializeAsString()); !st.ok()) {
      pipeline_->Cancel(*r);
      return absl::UnavailableError(absl::StrCat("the job could not be recorded: ", st.message()));
    }
  }
  std::lock_guard<std::mutex> lock(jobs_mu_);
  jobs_[(*r)->job_id] = *r;
  return r;
}

void ClientApi::EnableJobs(JobStore* store, JobJournalOptions options) {
  journal_ = std::make_unique<JobJournal>(
      store, options, [this](absl::Time cutoff) { ExpireJobs(cutoff); },
      [this](const std::shared_ptr<Request>& job) { Retire(job); });
}

absl::Status ClientApi::StartJobs() {
  if (!journal_) return absl::FailedPreconditionError("StartJobs before EnableJobs");
  if (JobStore* store = journal_->store(); store != nullptr) {
    // The finished jobs stay in the store: FindJob and ListJobs read them there.
    auto stored = store->LoadUnfinished();
    if (!stored.ok()) return stored.status();
    int64_t resumed = 0;
    for (const StoredJob& job : *stored) {
      std::shared_ptr<Request> r = Restore(job);
      std::lock_guard<std::mutex> lock(jobs_mu_);
      if (r->done()) {
        // Its stored tokens had ended it, or it could not be rebuilt: Restore recorded the end.
        finished_.Put(job.job_id, r, CachedBytes(*r));
      } else {
        ++resumed;
        jobs_[job.job_id] = std::move(r);
      }
    }
    LP_LOG(INFO) << "resumed " << resumed << " unfinished jobs (" << stored->size() - resumed
                 << " more had ended unrecorded)";
  }
  journal_->Start();
  return absl::OkStatus();
}

void ClientApi::Retire(const std::shared_ptr<Request>& job) {
  std::lock_guard<std::mutex> lock(jobs_mu_);
  jobs_.erase(job->job_id);
  finished_.Put(job->job_id, job, CachedBytes(*job));
}

int64_t ClientApi::CachedBytes(const Request& job) {
  int64_t bytes = static_cast<int64_t>(sizeof(Request) + job.prompt.size() * sizeof(int32_t) +
                                       job.generated.size() * sizeof(int32_t));
  // A decoded image is most of a multimodal job (768x768 RGB: 1.7 MB), kept for replays.
  if (job.media != nullptr) {
    for (const RgbImage& image : job.media->images()) bytes += static_cast<int64_t>(image.rgb.size());
    for (const std::vector<float>& audio : job.media->audios()) bytes += static_cast<int64_t>(audio.size() * sizeof(float));
  }
  job.events.Read([&](const RequestView& v) {
    bytes += static_cast<int64_t>(v.tokens.size() * sizeof(v1::TokenInfo) + v.final_text.size());
    for (const std::string& piece : v.pieces) bytes += static_cast<int64_t>(piece.size() + sizeof(std::string));
  });
  return bytes;
}

std::shared_ptr<Request> ClientApi::InMemory(const std::string& id) {
  if (auto it = jobs_.find(id); it != jobs_.end()) return it->second;
  return finished_.Get(id).value_or(nullptr);
}

std::shared_ptr<Request> ClientApi::Restore(const StoredJob& stored) {
  v1::GenerateRequest req;
  absl::StatusOr<std::shared_ptr<Request>> built = absl::DataLossError("its stored request does not parse");
  if (req.ParseFromString(stored.request)) built = Build(req, /*fill_max_new_tokens=*/false);
  std::shared_ptr<Request> r;
  if (built.ok() && static_cast<int64_t>((*built)->prompt.size()) != stored.prompt_tokens) {
    built = absl::FailedPreconditionError(absl::StrCat("its prompt is ", (*built)->prompt.size(), " tokens now, ",
                                                       stored.prompt_tokens, " when submitted (another tokenizer?)"));
  }
  if (built.ok()) {
    r = *built;
  } else {
    r = std::make_shared<Request>();
    r->id = next_id_++;
  }
  r->job_id = stored.job_id;
  r->owner = stored.owner;
  r->created = JobJournal::SteadyOf(stored.created_unix_ms);
  // The stored tokens, through the text stream again: the same text, and the stop checks where they were.
  std::vector<v1::TokenInfo> tokens(stored.tokens.size());
  std::vector<std::string> pieces;
  std::string final_text;
  StopChecker::Reason reason = StopChecker::Reason::kNone;
  for (size_t i = 0; built.ok() && i < stored.tokens.size() && reason == StopChecker::Reason::kNone; ++i) {
    if (!tokens[i].ParseFromString(stored.tokens[i])) {
      built = absl::DataLossError(absl::StrCat("its stored token ", i, " does not parse"));
      break;
    }
    TextStream::Step step = r->text->Push(tokens[i].id());
    r->generated.push_back(tokens[i].id());
    pieces.push_back(std::move(step.text));
    final_text = std::move(step.final_text);
    reason = step.reason;
  }
  tokens.resize(pieces.size());
  const bool final = IsFinal(stored.state);
  const bool ended_unrecorded = !final && built.ok() && reason != StopChecker::Reason::kNone;
  std::string finish_reason = stored.finish_reason;
  absl::Status error = final ? JobJournal::DecodeError(stored.error) : built.status();
  if (ended_unrecorded) finish_reason = reason == StopChecker::Reason::kMaxTokens ? "length" : "stop";
  if (!final && !built.ok()) finish_reason = "error";
  const bool done = final || ended_unrecorded || !built.ok();
  if (done) r->state = RequestState::kDone;
  r->events.Publish([&](RequestView& v) {
    v.tokens = tokens;
    v.pieces = pieces;
    v.prefilled = std::min<int64_t>(stored.prefilled, static_cast<int64_t>(r->prompt.size()));
    if (!done) return;
    v.state = RequestState::kDone;
    v.final_text = final_text;
    v.finish_reason = finish_reason;
    v.error = error;
    v.finished = stored.finished_unix_ms > 0 ? JobJournal::SteadyOf(stored.finished_unix_ms) : Request::Clock::now();
  });
  if (!done) {
    journal_->Watch(*r);
    journal_->Follow(r, static_cast<int64_t>(tokens.size()));
    if (auto st = pipeline_->Submit(r); !st.ok()) {
      r->state = RequestState::kDone;
      r->events.Publish([&](RequestView& v) {
        v.state = RequestState::kDone;
        v.finish_reason = "error";
        v.error = st;
        v.finished = Request::Clock::now();
      });
    }
  } else if (!final) {
    journal_->WriteEnd(r, static_cast<int64_t>(tokens.size()));
  }
  return r;
}

void ClientApi::ExpireJobs(absl::Time cutoff) {
  const auto cutoff_steady = JobJournal::SteadyOf(absl::ToUnixMillis(cutoff));
  auto expired = [&](const std::shared_ptr<Request>& r) {
    bool old = false;
    r->events.Read([&](const RequestView& v) { old = v.done() && v.finished && *v.finished < cutoff_steady; });
    return old;
  };
  std::lock_guard<std::mutex> lock(jobs_mu_);
  for (auto it = jobs_.begin(); it != jobs_.end();) it = expired(it->second) ? jobs_.erase(it) : std::next(it);
  finished_.EraseIf(expired);
}

std::string ClientApi::OwnerOf(const ClientGate::Pass& pass) const {
  return gate_ && gate_->authenticates() ? pass.client() : std::string();
}

bool ClientApi::MaySee(const Request& job, const ClientGate::Pass& pass) const {
  return job.owner.empty() || job.owner == pass.client() || (gate_ && gate_->IsAdmin(pass.client()));
}

absl::StatusOr<std::shared_ptr<Request>> ClientApi::FindJob(const std::string& id, const ClientGate::Pass& pass) {
  const absl::Status unknown = absl::NotFoundError(absl::StrCat("unknown job id \"", id, "\""));
  std::shared_ptr<Request> job;
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    job = InMemory(id);
  }
  JobStore* store = journal_ ? journal_->store() : nullptr;
  if (job == nullptr && store != nullptr) {
    // Read outside the lock: a slow disk holds up this call, not every other job's.
    absl::StatusOr<StoredJob> stored = store->LoadJob(id);
    if (absl::IsNotFound(stored.status())) return unknown;
    if (!stored.ok()) return stored.status();
    if (!IsFinal(stored->state)) {
      // Every unfinished job runs in memory until its end is recorded.
      return absl::InternalError(absl::StrCat("job \"", id, "\" is unfinished in the store but not running"));
    }
    job = Restore(*stored);
    std::lock_guard<std::mutex> lock(jobs_mu_);
    finished_.Put(id, job, CachedBytes(*job));
  }
  if (job == nullptr || !MaySee(*job, pass)) return unknown;
  return job;
}

absl::Status ClientApi::CheckStreamOffset(const Request& job, int64_t offset) const {
  if (offset < 0) return absl::InvalidArgumentError("offset must be >= 0");
  // An offset past what the job has (when done) or can ever have (while running) would wait for
  // nothing: say so instead of holding the stream open.
  int64_t have = 0;
  bool done = false;
  job.events.Read([&](const RequestView& v) {
    have = static_cast<int64_t>(v.tokens.size());
    done = v.done();
  });
  const int64_t limit = done ? have : job.max_new_tokens;
  if (offset > limit) {
    return absl::OutOfRangeError(absl::StrCat("offset ", offset, " is past the end of job \"", job.job_id, "\", which ",
                                              done ? "ended with " : "can produce at most ", limit, " tokens"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::ListJobsResponse> ClientApi::ListJobs(const ClientGate::Pass& pass, const JobPage& page) {
  v1::ListJobsResponse out;
  const bool every_owner = !gate_ || !gate_->authenticates() || gate_->IsAdmin(pass.client());
  auto wanted = [&](const v1::JobInfo& info) {
    return page.state == v1::JOB_STATE_UNSPECIFIED || info.state() == page.state;
  };
  int64_t last_seq = 0;
  bool more = false;
  JobStore* store = journal_ ? journal_->store() : nullptr;
  if (store != nullptr) {
    JobQuery query;
    if (page.state != v1::JOB_STATE_UNSPECIFIED) query.state = JobJournal::StoredStateOf(page.state);
    if (!every_owner) query.owner = pass.client();
    query.before_seq = page.before_seq;
    query.limit = page.size + 1;  // one more says whether there is a next page
    absl::StatusOr<std::vector<StoredJob>> rows = store->List(query);
    if (!rows.ok()) return rows.status();
    more = static_cast<int64_t>(rows->size()) > page.size;
    if (more) rows->pop_back();
    for (const StoredJob& row : *rows) {
      last_seq = row.seq;
      v1::JobInfo info;
      std::shared_ptr<Request> running;
      {
        std::lock_guard<std::mutex> lock(jobs_mu_);
        if (auto it = jobs_.find(row.job_id); it != jobs_.end()) running = it->second;
      }
      // A running job as it is now; the store has it as of its last commit (at most commit_interval ago).
      if (running != nullptr) {
        FillJobInfo(*running, false, &info);
      } else {
        FillJobInfo(row, &info);
      }
      if (wanted(info)) *out.add_jobs() = std::move(info);
    }
  } else {
    // In memory only: every job is in jobs_, numbered in submission order by its request id.
    std::vector<std::shared_ptr<Request>> jobs;
    {
      std::lock_guard<std::mutex> lock(jobs_mu_);
      for (auto& [id, r] : jobs_) {
        if (MaySee(*r, pass) && (page.before_seq == 0 || static_cast<int64_t>(r->id) < page.before_seq)) jobs.push_back(r);
      }
    }
    std::sort(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) { return a->id > b->id; });
    for (const auto& r : jobs) {
      v1::JobInfo info;
      FillJobInfo(*r, false, &info);
      if (!wanted(info)) continue;
      if (out.jobs_size() == page.size) {
        more = true;
        break;
      }
      last_seq = static_cast<int64_t>(r->id);
      *out.add_jobs() = std::move(info);
    }
  }
  if (more) out.set_next_page_token(NextJobPageToken(page.state, last_seq));
  return out;
}

void ClientApi::FillJobInfo(const StoredJob& job, v1::JobInfo* info) {
  info->set_job_id(job.job_id);
  static_assert(static_cast<int>(StoredJobState::kQueued) == v1::JOB_QUEUED &&
                static_cast<int>(StoredJobState::kCancelled) == v1::JOB_CANCELLED);
  info->set_state(static_cast<v1::JobState>(job.state));
  info->set_prompt_tokens(job.prompt_tokens);
  info->set_prefilled_tokens(job.prefilled);
  info->set_generated_tokens(job.generated);
  info->set_finish_reason(job.finish_reason);
  if (absl::Status error = JobJournal::DecodeError(job.error); !error.ok()) info->set_error(std::string(error.message()));
}

void ClientApi::FillJobInfo(const Request& r, bool with_tokens, v1::JobInfo* info) {
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

absl::StatusOr<std::vector<int32_t>> ClientApi::Tokenize(const v1::TokenizeRequest& req) const {
  if (tokenizer_ == nullptr) return absl::FailedPreconditionError("the coordinator has no tokenizer");
  if (auto st = CheckTextLength(req.text().size(), "text"); !st.ok()) return st;
  auto media = DecodeAttachments(req.attachments());
  if (!media.ok()) return media.status();
  SoftTokenExpander soft = (*media)->Expander();
  std::vector<int32_t> ids =
      req.chat() ? BuildChatPrompt(*tokenizer_, req.text(), {}, &soft) : soft.EncodePrompt(*tokenizer_, req.text(), req.add_bos());
  if (auto st = soft.Finish(); !st.ok()) return st;
  return ids;
}

absl::StatusOr<std::string> ClientApi::Detokenize(const v1::DetokenizeRequest& req) const {
  if (tokenizer_ == nullptr) return absl::FailedPreconditionError("the coordinator has no tokenizer");
  // The model's vocabulary, as Generate and Score check it (the tokenizer knows one id more).
  if (auto st = CheckIds(req.ids().data(), req.ids_size()); !st.ok()) return st;
  return tokenizer_->Decode({req.ids().data(), static_cast<size_t>(req.ids_size())}, req.skip_special_tokens());
}

}  // namespace layerpipe
