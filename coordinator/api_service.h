// The coordinator's gRPC services: the client API (LayerPipe, over ClientApi) and the StepSink the last
// stage reports to.
#ifndef LAYERPIPE_COORDINATOR_API_SERVICE_H_
#define LAYERPIPE_COORDINATOR_API_SERVICE_H_

#include "coordinator/client_api.h"
#include "coordinator/pipeline.h"
#include "proto/internal.grpc.pb.h"
#include "proto/layerpipe.grpc.pb.h"

namespace layerpipe {

class LayerPipeService final : public v1::LayerPipe::Service {
 public:
  explicit LayerPipeService(ClientApi* api) : api_(api) {}

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
  grpc::Status Stream(grpc::ServerContext* ctx, const std::shared_ptr<Request>& r, int64_t offset, bool owner,
                      grpc::ServerWriter<v1::GenerateResponse>* writer);

  ClientApi* api_;
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
