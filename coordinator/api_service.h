// The coordinator's gRPC services: the client API (LayerPipe) and the StepSink the last stage reports to.
#ifndef LAYERPIPE_COORDINATOR_API_SERVICE_H_
#define LAYERPIPE_COORDINATOR_API_SERVICE_H_

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "coordinator/client_gate.h"
#include "coordinator/pipeline.h"
#include "engine/model/config.h"
#include "engine/tokenizer/tokenizer.h"
#include "proto/internal.grpc.pb.h"
#include "proto/layerpipe.grpc.pb.h"

namespace layerpipe {

class LayerPipeService final : public v1::LayerPipe::Service {
 public:
  // `tokenizer` may be null: text in and out is then refused, ids still work. Every RPC passes `gate`
  // first when there is one (authentication, per-client limits).
  LayerPipeService(const ModelConfig& config, const Tokenizer* tokenizer, std::vector<int32_t> default_stop_ids,
                   Pipeline* pipeline, std::shared_ptr<ClientGate> gate = nullptr);

  // The largest request a client may need to send (a text or ids that fill the context); the client
  // port refuses larger messages.
  int64_t MaxRequestBytes() const;

  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status Score(grpc::ServerContext* ctx, const v1::ScoreRequest* req, v1::ScoreResponse* resp) override;
  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req, v1::JobInfo* resp) override;
  grpc::Status StreamJob(grpc::ServerContext* ctx, const v1::StreamJobRequest* req,
                         grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req, v1::JobInfo* resp) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override;
  grpc::Status Tokenize(grpc::ServerContext* ctx, const v1::TokenizeRequest* req,
                        v1::TokenizeResponse* resp) override;
  grpc::Status Detokenize(grpc::ServerContext* ctx, const v1::DetokenizeRequest* req,
                          v1::DetokenizeResponse* resp) override;
  grpc::Status ClusterStatus(grpc::ServerContext* ctx, const v1::ClusterStatusRequest* req,
                             v1::ClusterStatusResponse* resp) override;

 private:
  absl::StatusOr<ClientGate::Pass> Admit(const grpc::ServerContext& ctx);
  absl::StatusOr<std::shared_ptr<Request>> BuildGenerate(const v1::GenerateRequest& req);
  absl::StatusOr<std::vector<int32_t>> CheckIds(const google::protobuf::RepeatedField<int32_t>& ids) const;
  // Streams tokens [offset, ...) of `r` until it ends; `owner` requests are cancelled on disconnect.
  grpc::Status Stream(grpc::ServerContext* ctx, const std::shared_ptr<Request>& r, int64_t offset, bool owner,
                      grpc::ServerWriter<v1::GenerateResponse>* writer);
  // The job, when the client of `pass` may see it (its own, or any for an admin); else null.
  // OUT_OF_RANGE when a text of `bytes` cannot fit the context, checked before tokenizing it.
  absl::Status CheckTextLength(size_t bytes, const char* what) const;
  std::shared_ptr<Request> FindJob(const std::string& id, const ClientGate::Pass& pass);
  bool MaySee(const Request& job, const ClientGate::Pass& pass) const;
  // Who owns what `pass` submits: its token's name, or nobody when clients are not told apart.
  std::string OwnerOf(const ClientGate::Pass& pass) const;
  static void FillJobInfo(const Request& r, bool with_tokens, v1::JobInfo* info);

  const ModelConfig config_;
  const Tokenizer* tokenizer_;
  const int64_t max_token_bytes_;  // input bytes one token stands for at most
  const std::vector<int32_t> default_stop_ids_;
  Pipeline* pipeline_;
  const std::shared_ptr<ClientGate> gate_;
  std::atomic<uint64_t> next_id_{1};
  std::mutex jobs_mu_;
  std::map<std::string, std::shared_ptr<Request>> jobs_;
};

class StepSinkService final : public internal::v1::StepSink::Service {
 public:
  explicit StepSinkService(Pipeline* pipeline) : pipeline_(pipeline) {}
  grpc::Status StepDone(grpc::ServerContext*, const internal::v1::StepResult* result, internal::v1::StepAck*) override {
    pipeline_->OnStepDone(*result);
    return grpc::Status::OK;
  }

 private:
  Pipeline* pipeline_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_API_SERVICE_H_
