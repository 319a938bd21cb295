// Everything one Assign sets up on a worker — the weights, the stage and its backend, the hop to the
// next stage, the inbox of a device link from the previous one, the channel to the coordinator — and
// how it is built from an AssignRequest. An assignment is replaced whole by the next Assign.
#ifndef LAYERPIPE_WORKER_ASSIGNMENT_H_
#define LAYERPIPE_WORKER_ASSIGNMENT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/cpu/thread_pool.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "proto/internal.grpc.pb.h"
#include "transport/failed_links.h"
#include "transport/next_hop.h"
#include "transport/peer_link_inbox.h"
#include "worker/stage.h"
#include "worker/worker_options.h"

namespace layerpipe {

struct Assignment {
  uint64_t epoch = 0;
  internal::v1::AssignRequest request;  // with model_dir and precision resolved
  std::shared_ptr<const ModelWeights> weights;
  std::unique_ptr<Stage> stage;
  std::shared_ptr<NextHop> next;  // null on the last stage
  std::shared_ptr<internal::v1::StepSink::StubInterface> sink;
  std::unique_ptr<PeerLinkInbox> inbox;  // the device link from the previous stage, once offered

  // Aborts both directions' device links: a compute thread waiting for rows from a peer that is gone
  // lets go, so a new Assign or Stop never waits on it.
  void RetireLinks();
};

// What an assignment is built with besides the request.
struct AssignmentContext {
  const WorkerOptions* options;
  ThreadPool* pool;
  std::string host_name;
  int64_t worker_kv_budget = 0;
  std::shared_ptr<FailedDeviceLinks> failed_links;
};

// Everything about an AssignRequest that can be refused without reading weights.
absl::Status CheckAssign(const internal::v1::AssignRequest& request, const ModelConfig& config);

// The weights an assignment of `request` maps (its layers; the embedding on the first stage, the head
// on the last), and whether two requests map the same ones (a new epoch keeps them).
WeightSelection SelectionOf(const internal::v1::AssignRequest& request);
bool SameWeights(const internal::v1::AssignRequest& a, const internal::v1::AssignRequest& b);
int64_t WeightBytes(const ModelWeights& weights);

// Builds the stage, its backend and its links for a checked `request` with its `weights` loaded.
absl::StatusOr<std::shared_ptr<Assignment>> BuildAssignment(const internal::v1::AssignRequest& request, Precision precision,
                                                            std::shared_ptr<const ModelWeights> weights,
                                                            const AssignmentContext& context);

}  // namespace layerpipe

#endif  // LAYERPIPE_WORKER_ASSIGNMENT_H_
