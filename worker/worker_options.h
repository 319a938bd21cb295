// How a worker process is set up (flags, and what tests and layerpipe-mpi plug in).
#ifndef LAYERPIPE_WORKER_WORKER_OPTIONS_H_
#define LAYERPIPE_WORKER_WORKER_OPTIONS_H_

#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include "engine/backend/layer_backend.h"
#include "transport/next_hop.h"
#include "transport/outbox.h"

namespace layerpipe {

// Largest gRPC message a worker takes or sends: a frame of kMaxRowsPerFrame fp32 rows of the real
// model is 120 MiB, a result with kMaxReturnedLogits logits 256 MiB.
inline constexpr int kMaxMessageBytes = 512 << 20;

// The prefix cache's default share of a worker's KV budget. The coordinator evicts kept prefixes for
// any request that needs their room, so a large share costs running requests nothing.
inline constexpr double kDefaultPrefixCacheShare = 0.5;

struct WorkerOptions {
  std::string listen_address = "127.0.0.1:0";
  // Used when an AssignRequest leaves model_dir empty.
  std::string default_model_dir;
  int threads = 0;              // compute threads; 0: LAYERPIPE_THREADS or all cores
  int64_t kv_budget_bytes = 0;  // 0: half the physical memory
  // What kept prefixes (the prefix cache) may take of the KV budget: bytes, or with
  // prefix_cache_share >= 0 that share of it. 0 bytes: off.
  int64_t prefix_cache_bytes = 0;
  double prefix_cache_share = kDefaultPrefixCacheShare;
  OutboxOptions outbox;
  // Runs the assigned layers; empty: the CPU executor on the worker's thread pool.
  BackendMaker make_backend;
  // Weights of a CPU stage copied into huge pages (engine/model/huge_pages.h); false: read in place
  // from the mapped checkpoint.
  bool huge_pages = false;
  // Picks the hop to the next stage per assignment (e.g. MPI between ranks of one job); unset, or
  // returning null: gRPC to the assignment's next_address.
  NextHopFactory next_hop;
  // This worker's host name, offered with its device when it links to the next stage (two stages on
  // one GPU cannot link). Empty: gethostname().
  std::string host_name;
  // Mutual TLS: the server's credentials (demanding a client certificate) and the channels' to the next
  // stage and the coordinator (presenting the same certificate). Null: plaintext.
  std::shared_ptr<grpc::ServerCredentials> server_credentials;
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_WORKER_WORKER_OPTIONS_H_
