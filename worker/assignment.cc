#include "worker/assignment.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/cpu/cpu_backend.h"
#include "transport/peer_link_hop.h"

namespace layerpipe {
namespace {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                          const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  return grpc::CreateCustomChannel(address, credentials ? credentials : grpc::InsecureChannelCredentials(), args);
}

}  // namespace

void Assignment::RetireLinks() {
  if (!inbox) {
    if (next) next->Retire();
    return;
  }
  // Both directions at once: aborting one link may wait on the device until the other's transfer,
  // stuck on a dead peer, is aborted too.
  std::thread outbound([this] {
    if (next) next->Retire();
  });
  inbox->Retire();
  outbound.join();
}

WeightSelection SelectionOf(const internal::v1::AssignRequest& r) {
  return WeightSelection{r.layer_begin(), r.layer_end(), /*embedding=*/r.first(), /*head=*/r.last()};
}

bool SameWeights(const internal::v1::AssignRequest& a, const internal::v1::AssignRequest& b) {
  return a.model_dir() == b.model_dir() && a.layer_begin() == b.layer_begin() && a.layer_end() == b.layer_end() &&
         a.first() == b.first() && a.last() == b.last() && a.quantize() == b.quantize() &&
         a.quantize_head() == b.quantize_head();
}

int64_t WeightBytes(const ModelWeights& w) {
  int64_t bytes = 0;
  for (int l = w.selection().layer_begin; l < w.selection().layer_end; ++l) bytes += w.LayerMatrixBytes(l);
  if (w.selection().embedding || w.selection().head) bytes += w.embed_tokens().bytes();
  return bytes;
}

absl::Status CheckAssign(const internal::v1::AssignRequest& r, const ModelConfig& config) {
  const int layers = config.num_layers;
  if (r.layer_begin() < 0 || r.layer_end() > layers || r.layer_begin() >= r.layer_end()) {
    return absl::InvalidArgumentError(absl::StrCat("layer range [", r.layer_begin(), ", ", r.layer_end(),
                                                   ") is not a non-empty range within the model's ", layers,
                                                   " layers"));
  }
  if (r.first() != (r.layer_begin() == 0)) {
    return absl::InvalidArgumentError(absl::StrCat("the first stage must start at layer 0 and only it may; got first=",
                                                   r.first(), " with layer_begin ", r.layer_begin()));
  }
  if (r.last() != (r.layer_end() == layers)) {
    return absl::InvalidArgumentError(absl::StrCat("the last stage must end at layer ", layers,
                                                   " and only it may; got last=", r.last(), " with layer_end ",
                                                   r.layer_end()));
  }
  if (!r.last() && r.next_address().empty()) {
    return absl::InvalidArgumentError("next_address is required for every stage but the last");
  }
  if (r.coordinator_address().empty()) {
    return absl::InvalidArgumentError("coordinator_address is required (results and step errors go there)");
  }
  if (r.kv_budget_bytes() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("kv_budget_bytes ", r.kv_budget_bytes(), " is negative"));
  }
  if (r.stage() < 0) return absl::InvalidArgumentError(absl::StrCat("stage ", r.stage(), " is negative"));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Assignment>> BuildAssignment(const internal::v1::AssignRequest& request, Precision precision,
                                                            std::shared_ptr<const ModelWeights> weights,
                                                            const AssignmentContext& ctx) {
  const WorkerOptions& options = *ctx.options;
  auto a = std::make_shared<Assignment>();
  a->epoch = request.epoch();
  a->request = request;
  a->weights = std::move(weights);
  StageOptions so;
  so.stage = request.stage();
  so.first = request.first();
  so.last = request.last();
  so.precision = precision;
  // The coordinator may ask for less than the worker's own limit, never more.
  so.kv_budget_bytes = request.kv_budget_bytes() > 0 ? std::min(request.kv_budget_bytes(), ctx.worker_kv_budget)
                                                     : ctx.worker_kv_budget;
  std::unique_ptr<LayerBackend> backend;
  if (options.make_backend) {
    auto made = options.make_backend(*a->weights, precision, *ctx.pool);
    if (!made.ok()) return made.status();
    backend = std::move(*made);
  } else {
    backend = std::make_unique<CpuBackend>(*a->weights, precision, *ctx.pool);
  }
  // Only a backend that snapshots its caches keeps prefixes; the coordinator sends none to a stage that
  // reports a budget of 0.
  if (backend->keeps_prefixes()) {
    so.prefix_cache_bytes = options.prefix_cache_share >= 0
                                ? static_cast<int64_t>(options.prefix_cache_share * static_cast<double>(so.kv_budget_bytes))
                                : std::min(options.prefix_cache_bytes, so.kv_budget_bytes);
  }
  a->stage = std::make_unique<Stage>(a->weights, so, std::move(backend));
  if (!request.first() && a->stage->backend()->device_handoff()) {
    a->inbox = std::make_unique<PeerLinkInbox>(a->stage->backend(), a->stage->shape().hidden_size, ctx.failed_links);
  }
  if (!request.last()) {
    if (options.next_hop) {
      auto hop = options.next_hop(request);
      if (!hop.ok()) return hop.status();
      a->next = std::move(*hop);
    }
    std::shared_ptr<internal::v1::Worker::StubInterface> next_worker =
        internal::v1::Worker::NewStub(MakeChannel(request.next_address(), options.channel_credentials));
    if (!a->next) a->next = std::make_shared<GrpcNextHop>(next_worker);
    // A GPU stage offers the next one a device link for the activations; the inner hop keeps carrying
    // the frames' metadata.
    if (a->stage->backend()->device_handoff()) {
      a->next = std::make_shared<PeerLinkHop>(a->next, next_worker, a->stage->backend(),
                                              PeerLinkHopOptions{request.epoch(), request.stage(), ctx.host_name});
    }
  }
  a->sink = internal::v1::StepSink::NewStub(MakeChannel(request.coordinator_address(), options.channel_credentials));
  return a;
}

}  // namespace layerpipe
