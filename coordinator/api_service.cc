#include "coordinator/api_service.h"

#include "common/grpc_status.h"
#include "coordinator/jobs/job_listing.h"

namespace layerpipe {

absl::StatusOr<ClientGate::Pass> LayerPipeService::Admit(const grpc::ServerContext& ctx) {
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  const absl::string_view authorization =
      it == md.end() ? absl::string_view() : absl::string_view(it->second.data(), it->second.size());
  return api_->Admit(authorization, ctx.peer());
}

grpc::Status LayerPipeService::Stream(grpc::ServerContext* ctx, const std::shared_ptr<Request>& r, int64_t offset,
                                      bool owner, grpc::ServerWriter<v1::GenerateResponse>* writer) {
  return ToGrpc(api_->Follow(
      r, offset, owner, [ctx] { return !ctx->IsCancelled(); },
      [ctx, writer](const v1::GenerateResponse& msg) { return !ctx->IsCancelled() && writer->Write(msg); }));
}

grpc::Status LayerPipeService::Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                                        grpc::ServerWriter<v1::GenerateResponse>* writer) {
  auto pass = Admit(*ctx);
  if (!pass.ok()) return ToGrpc(pass.status());
  auto r = api_->BuildGenerate(*req);
  if (!r.ok()) return ToGrpc(r.status());
  if (auto st = api_->pipeline()->Submit(*r); !st.ok()) return ToGrpc(st);
  return Stream(ctx, *r, 0, /*owner=*/true, writer);
}

grpc::Status LayerPipeService::Score(grpc::ServerContext* ctx, const v1::ScoreRequest* req, v1::ScoreResponse* resp) {
  auto pass = Admit(*ctx);
  if (!pass.ok()) return ToGrpc(pass.status());
  auto r = api_->BuildScore(*req);
  if (!r.ok()) return ToGrpc(r.status());
  auto out = api_->Score(*r, [ctx] { return !ctx->IsCancelled(); });
  if (!out.ok()) return ToGrpc(out.status());
  *resp = *std::move(out);
  return grpc::Status::OK;
}

grpc::Status LayerPipeService::SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                                         v1::SubmitJobResponse* resp) {
  auto pass = Admit(*ctx);
  if (!pass.ok()) return ToGrpc(pass.status());
  auto r = api_->SubmitJob(req->request(), *pass);
  if (!r.ok()) return ToGrpc(r.status());
  resp->set_job_id((*r)->job_id);
  return grpc::Status::OK;
}

grpc::Status LayerPipeService::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req, v1::JobInfo* resp) {
  auto pass = Admit(*ctx);
  if (!pass.ok()) return ToGrpc(pass.status());
  auto r = api_->FindJob(req->job_id(), *pass);
  if (!r.ok()) return ToGrpc(r.status());
  ClientApi::FillJobInfo(**r, true, resp);
  return grpc::Status::OK;
}

grpc::Status LayerPipeService::StreamJob(grpc::ServerContext* ctx, const v1::StreamJobRequest* req,
                                         grpc::ServerWriter<v1::GenerateResponse>* writer) {
  auto pass = Admit(*ctx);
  if (!pass.ok()) return ToGrpc(pass.status());
  auto r = api_->FindJob(req->job_id(), *pass);
  if (!r.ok()) return ToGrpc(r.status());
  if (auto st = api_->CheckStreamOffset(**r, req->offset()); !st.ok()) return ToGrpc(st);
  // A job outlives its followers: a disconnect does not cancel it.
  return Stream(ctx, *r, req->offset(), /*owner=*/false, writer);
}

grpc::Status LayerPipeService::CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req, v1::JobInfo* resp) {
  auto pass = Admit(*ctx);
  if (!pass.ok()) return ToGrpc(pass.status());
  auto r = api_->FindJob(req->job_id(), *pass);
  if (!r.ok()) return ToGrpc(r.status());
  api_->pipeline()->Cancel(*r);
  ClientApi::FillJobInfo(**r, false, resp);
  return grpc::Status::OK;
}

grpc::Status LayerPipeService::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                                        v1::ListJobsResponse* resp) {
  auto pass = Admit(*ctx);
  if (!pass.ok()) return ToGrpc(pass.status());
  auto page = ParseJobPage(req->page_size(), req->page_token(), req->state());
  if (!page.ok()) return ToGrpc(api_->Refused(page.status()));
  auto listing = api_->ListJobs(*pass, *page);
  if (!listing.ok()) return ToGrpc(listing.status());
  *resp = *std::move(listing);
  return grpc::Status::OK;
}

grpc::Status LayerPipeService::Tokenize(grpc::ServerContext* ctx, const v1::TokenizeRequest* req,
                                        v1::TokenizeResponse* resp) {
  auto pass = Admit(*ctx);
  if (!pass.ok()) return ToGrpc(pass.status());
  auto ids = api_->Tokenize(*req);
  if (!ids.ok()) return ToGrpc(ids.status());
  *resp->mutable_ids() = {ids->begin(), ids->end()};
  return grpc::Status::OK;
}

grpc::Status LayerPipeService::Detokenize(grpc::ServerContext* ctx, const v1::DetokenizeRequest* req,
                                          v1::DetokenizeResponse* resp) {
  auto pass = Admit(*ctx);
  if (!pass.ok()) return ToGrpc(pass.status());
  auto text = api_->Detokenize(*req);
  if (!text.ok()) return ToGrpc(text.status());
  resp->set_text(*std::move(text));
  return grpc::Status::OK;
}

grpc::Status LayerPipeService::ClusterStatus(grpc::ServerContext* ctx, const v1::ClusterStatusRequest*,
                                             v1::ClusterStatusResponse* resp) {
  auto pass = Admit(*ctx);
  if (!pass.ok()) return ToGrpc(pass.status());
  *resp = api_->pipeline()->Status();
  return grpc::Status::OK;
}

}  // namespace layerpipe
