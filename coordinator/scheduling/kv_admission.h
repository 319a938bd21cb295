// Who is admitted (the capacity side of scheduling): each stage's KV capacity and what admitted
// requests have reserved of it, and the queue of requests that wait for room. Pure: no RPCs, no
// threads, no locks (the pipeline calls it under its own).
//
// Policy: a request needs, on every stage, the KV bytes of its whole sequence (prompt + max_new_tokens,
// engine/model/kv_bytes.h). One that can never fit a stage is refused with RESOURCE_EXHAUSTED and the
// numbers; one that fits the capacity but not what is free waits. Waiting requests are admitted in
// arrival order, each as soon as it fits: a small one may pass a large one that does not fit yet, but
// only max_bypass times. After that nothing behind the large one is admitted until it is, so as the
// running sequences finish it gets its room: a request that fits the capacity is admitted within a
// bounded time however many smaller ones keep arriving.
// With the prefix cache on, the kept prefixes' bytes count on every stage too, and a request reserves only
// what it holds alone (scheduling/prefix_cache.h); a request that does not fit evicts prefixes no running
// request uses (least recently used first) before it waits, so the cache never keeps out a request that
// would fit without it.
// While any stage drains (its worker is shutting down) nothing is admitted: its sequences would have
// to be replayed on the replacement anyway.
#ifndef LAYERPIPE_COORDINATOR_SCHEDULING_KV_ADMISSION_H_
#define LAYERPIPE_COORDINATOR_SCHEDULING_KV_ADMISSION_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/scheduling/planner.h"
#include "coordinator/scheduling/prefix_cache.h"
#include "coordinator/request.h"
#include "engine/model/config.h"
#include "engine/model/precision.h"

namespace layerpipe {

class KvAdmission {
 public:
  struct Stage {
    std::string address;  // for messages
    LayerRange range;
    int64_t capacity = 0;  // bytes, as the worker reported in Assign
    int64_t reserved = 0;  // by admitted requests
    bool draining = false;
  };

  // How often a waiting request may be passed by later ones that fit sooner.
  static constexpr int kDefaultMaxBypass = 8;

  KvAdmission(const ModelConfig& config, Precision precision, std::vector<Stage> stages,
              int max_bypass = kDefaultMaxBypass);

  // Bytes per stage a sequence of `tokens` positions needs; RESOURCE_EXHAUSTED when it exceeds a
  // stage's capacity (so it could never be admitted).
  absl::StatusOr<std::vector<int64_t>> Need(int64_t tokens) const;

  // Queues `request` (its kv_need set from Need) behind the others.
  absl::Status Enqueue(std::shared_ptr<Request> request);
  // Takes every queued request that fits now, in queue order, and reserves its bytes.
  std::vector<std::shared_ptr<Request>> AdmitWaiting();
  // Gives back what an admitted request reserved, and its use of kept prefixes.
  void Release(Request& request);
  // Drops a request that is still waiting; false when it was not queued.
  bool Withdraw(const std::shared_ptr<Request>& request);
  // The stages keep no prefixes any more (a new epoch with the cache off): the running requests reserve
  // their whole sequences again and replay from 0.
  void TurnCacheOff(const std::vector<std::shared_ptr<Request>>& running);
  // Empties the queue (shutdown, giving up on recovery) and returns what was in it.
  std::deque<std::shared_ptr<Request>> TakeQueue();

  void SetCapacity(size_t stage, int64_t bytes) { stages_[stage].capacity = bytes; }
  PrefixCache& cache() { return cache_; }
  const PrefixCache& cache() const { return cache_; }
  void SetDraining(size_t stage, bool draining) { stages_[stage].draining = draining; }
  bool draining(size_t stage) const { return stages_[stage].draining; }
  bool paused() const;  // some stage drains
  const Stage& stage(size_t s) const { return stages_[s]; }
  size_t stages() const { return stages_.size(); }
  size_t queued() const { return queue_.size(); }

 private:
  // Admits `r` if it fits now (evicting unused prefixes when that makes it fit).
  bool TryAdmit(Request& r);

  const ModelConfig config_;
  const Precision precision_;
  const int max_bypass_;
  std::vector<Stage> stages_;
  std::deque<std::shared_ptr<Request>> queue_;
  PrefixCache cache_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_SCHEDULING_KV_ADMISSION_H_
