// What the coordinator's client front ends (gRPC in api_service.h, HTTP in http/) have in common,
// free of either transport: turning a request into a Request the pipeline runs (with every check a
// client may fail), following it as it streams, scoring, and the jobs table with its owners.
#ifndef LAYERPIPE_COORDINATOR_CLIENT_API_H_
#define LAYERPIPE_COORDINATOR_CLIENT_API_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/client_gate.h"
#include "coordinator/jobs/bounded_cache.h"
#include "coordinator/jobs/job_journal.h"
#include "coordinator/jobs/job_listing.h"
#include "coordinator/pipeline.h"
#include "engine/media/prompt_media.h"
#include "engine/model/config.h"
#include "engine/tokenizer/tokenizer.h"
#include "proto/layerpipe.pb.h"

namespace layerpipe {

// What an operator allows one request (--max-model-len, --max-new-tokens).
struct ClientLimits {
  int64_t max_model_len = 0;   // prompt + generated tokens; 0: the model's context
  int32_t max_new_tokens = 0;  // generated tokens; 0: no cap below max_model_len
};

class ClientApi {
 public:
  // `tokenizer` may be null: text in and out is then refused, ids still work. `gate` may be null:
  // everyone is let in.
  ClientApi(const ModelConfig& config, const Tokenizer* tokenizer, std::vector<int32_t> default_stop_ids,
            Pipeline* pipeline, std::shared_ptr<ClientGate> gate, ClientLimits limits = {});

  const ModelConfig& config() const { return config_; }
  int64_t max_model_len() const { return max_model_len_; }
  const Tokenizer* tokenizer() const { return tokenizer_; }
  Pipeline* pipeline() const { return pipeline_; }

  // The largest request a client may need to send (a text or ids that fill the context).
  int64_t MaxRequestBytes() const;

  // `authorization`: the "authorization" header or metadata ("" when absent); `peer` as gRPC spells it
  // ("ipv4:10.1.2.3:51234").
  absl::StatusOr<ClientGate::Pass> Admit(absl::string_view authorization, absl::string_view peer);

  // Every check of a generation request (input, lengths, sampling, stops); the request is not submitted.
  // With `fill_max_new_tokens`, max_new_tokens 0 means as many as the limits leave (OpenAI's default),
  // otherwise it is refused.
  absl::StatusOr<std::shared_ptr<Request>> BuildGenerate(const v1::GenerateRequest& req,
                                                         bool fill_max_new_tokens = false);
  absl::StatusOr<std::shared_ptr<Request>> BuildScore(const v1::ScoreRequest& req);

  // Messages of a generation as it goes: `write` gets the tokens of [offset, ...) as they come, the last
  // message with the finish reason, usage and timings; nothing is written while nothing is new, but
  // `idle` is called about every 100 ms of waiting (return false to stop). Returns the request's
  // error, or CANCELLED when `write` or `idle` said stop; then an `owner`'s request is cancelled.
  using Writer = std::function<bool(const v1::GenerateResponse&)>;
  using Idle = std::function<bool()>;
  absl::Status Follow(const std::shared_ptr<Request>& r, int64_t offset, bool owner, const Idle& idle,
                      const Writer& write);
  // Submits a score request and waits for it (cancelled when `idle` says stop).
  absl::StatusOr<v1::ScoreResponse> Score(const std::shared_ptr<Request>& r, const Idle& idle);

  // Jobs: submitted for `pass`'s client, who (or an admin) alone may see it afterwards.
  absl::StatusOr<std::shared_ptr<Request>> SubmitJob(const v1::GenerateRequest& req, const ClientGate::Pass& pass,
                                                     bool fill_max_new_tokens = false);
  // NOT_FOUND for an unknown id and for another client's job alike: an id tells nothing. A finished job
  // that has left memory is read back from the store.
  absl::StatusOr<std::shared_ptr<Request>> FindJob(const std::string& id, const ClientGate::Pass& pass);
  // OUT_OF_RANGE when `offset` is past what the job has (ended) or can ever have (running).
  absl::Status CheckStreamOffset(const Request& job, int64_t offset) const;
  // A page of the jobs `pass` may see, newest first, with the token of the next page (job_listing.h).
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const ClientGate::Pass& pass, const JobPage& page);
  static void FillJobInfo(const Request& r, bool with_tokens, v1::JobInfo* info);
  // A stored job as the listing shows it (without its tokens).
  static void FillJobInfo(const StoredJob& job, v1::JobInfo* info);

  // Durable jobs: records in `store` (null: in memory only), finished ones forgotten after the
  // retention. Resumes the stored unfinished jobs first — resubmitted, replaying what they had generated
  // (the same tokens as an undisturbed run, since sampling resumes its stream) — and then journals them.
  // With a store, memory holds the jobs that run and a bounded cache of finished ones
  // (kCachedFinishedJobs, kCachedFinishedJobBytes); every other finished job is in the store only.
  // EnableJobs before any server takes calls; StartJobs once the pipeline serves.
  void EnableJobs(JobStore* store, JobJournalOptions options);
  absl::Status StartJobs();
  // Forgets finished jobs that ended before `cutoff`.
  void ExpireJobs(absl::Time cutoff);

  // Counts a refusal in the metrics (layerpipe_requests_refused_total) and returns it: the checks here
  // count their own; a front end counts those it makes itself (a body that does not parse).
  absl::Status Refused(absl::Status status) const;

  // Tokenize/Detokenize with the same checks as generation.
  absl::StatusOr<std::vector<int32_t>> Tokenize(const v1::TokenizeRequest& req) const;
  absl::StatusOr<std::string> Detokenize(const v1::DetokenizeRequest& req) const;
  absl::Status CheckIds(const int32_t* ids, size_t n) const;

 private:
  // OUT_OF_RANGE when a text of `bytes` cannot fit the context, checked before tokenizing it.
  absl::Status CheckTextLength(size_t bytes, const char* what) const;
  // The attachments of one request, all together: their encoded bytes.
  static constexpr int64_t kMaxAttachmentBytes = int64_t{64} << 20;
  // The prompt's ids, its placeholders expanded through `soft`.
  absl::StatusOr<std::vector<int32_t>> PromptOf(const v1::GenerateRequest& req, SoftTokenExpander* soft) const;
  // A request's attachments, then those in its messages' parts, decoded (bounded by kMaxAttachmentBytes).
  absl::StatusOr<std::shared_ptr<const PromptMedia>> DecodeMedia(const v1::GenerateRequest& req) const;
  absl::StatusOr<std::shared_ptr<const PromptMedia>> DecodeAttachments(
      const google::protobuf::RepeatedPtrField<v1::Attachment>& attachments) const;
  absl::StatusOr<std::shared_ptr<const PromptMedia>> DecodeFiles(const std::vector<MediaFile>& files) const;
  // Pairs the prompt's runs of soft-token ids with `media` into r->media and r->soft.
  absl::Status AttachMedia(std::shared_ptr<const PromptMedia> media, Request* r) const;
  // BuildGenerate and BuildScore without counting their refusals (a restored job is no client's request).
  absl::StatusOr<std::shared_ptr<Request>> Build(const v1::GenerateRequest& req, bool fill_max_new_tokens);
  absl::StatusOr<std::shared_ptr<Request>> BuildScoreRequest(const v1::ScoreRequest& req);

  static constexpr int64_t kCachedFinishedJobs = 1024;
  static constexpr int64_t kCachedFinishedJobBytes = int64_t{64} << 20;

  bool MaySee(const Request& job, const ClientGate::Pass& pass) const;
  // A job whose end the journal has committed: from the running jobs into the cache.
  void Retire(const std::shared_ptr<Request>& job);
  // What a cached job holds, roughly: its prompt and media, its tokens and their text.
  static int64_t CachedBytes(const Request& job);
  // Under jobs_mu_: the job in memory (running, or cached), or null.
  std::shared_ptr<Request> InMemory(const std::string& id);
  absl::StatusOr<std::string> NewJobId() const;
  // One stored job as a Request again: ended, or resubmitted.
  std::shared_ptr<Request> Restore(const StoredJob& stored);
  // Who owns what `pass` submits: its token's name, or nobody when clients are not told apart.
  std::string OwnerOf(const ClientGate::Pass& pass) const;

  const ModelConfig config_;
  const int64_t max_model_len_;  // the context a request may use: the model's, or less
  const int32_t max_new_tokens_;  // 0: no cap below max_model_len_
  const Tokenizer* tokenizer_;
  const int64_t max_token_bytes_;  // input bytes one token stands for at most
  const std::vector<int32_t> default_stop_ids_;
  Pipeline* pipeline_;
  const std::shared_ptr<ClientGate> gate_;
  std::atomic<uint64_t> next_id_{1};
  std::mutex jobs_mu_;
  // Jobs that run, and finished ones until their end is recorded (with no store: every job until its
  // retention ends).
  std::map<std::string, std::shared_ptr<Request>> jobs_;
  BoundedCache<std::shared_ptr<Request>> finished_{kCachedFinishedJobs, kCachedFinishedJobBytes};
  std::unique_ptr<JobJournal> journal_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_CLIENT_API_H_
