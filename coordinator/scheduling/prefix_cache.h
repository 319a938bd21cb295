// The coordinator's side of the prefix cache: which prompt prefixes the stages keep (every stage keeps
// the same ones, each its own layers' share), what each costs them, and which running requests use one.
// The coordinator decides everything: which prefix a request starts from, which it keeps on the way,
// and which to evict (least recently used first, never one a running request uses). The stages only
// carry it out (StepSlice.prefix_from / save_prefix, StepFrame.drop_prefix), so a request is never sent
// to a prefix a stage lacks. Pure: no RPCs, no threads, no locks (KvAdmission calls it under the
// pipeline's lock).
//
// Memory: a kept prefix costs each stage KvBytesAtLength(its length): its pages, shared by reference
// with every sequence that started from it or kept it, and its sliding rings' copies. A request counts
// only what it holds alone: its whole sequence less the pages below the longest prefix it starts from or
// keeps (KvSharedBytesAtCut). The worker counts the same way, so a page is counted once.
//
// A prefix that a request keeps is "being made" until the slice that ends at it goes down the pipe;
// a later request that starts from it waits until then (the stages run steps in order), so two requests
// that share a document prefill it once. If its maker ends first, another user takes over making it.
#ifndef LAYERPIPE_COORDINATOR_SCHEDULING_PREFIX_CACHE_H_
#define LAYERPIPE_COORDINATOR_SCHEDULING_PREFIX_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator/request.h"
#include "coordinator/scheduling/planner.h"
#include "engine/model/config.h"
#include "engine/model/precision.h"

namespace layerpipe {

struct PrefixEntry {
  uint64_t key = 0;  // the stages' name for it, never reused by this coordinator
  std::string digest;
  int64_t length = 0;
  std::vector<int64_t> bytes;    // per stage
  bool kept = false;             // its saving slice went down the pipe: the stages hold it from that step on
  Request* maker = nullptr;      // while !kept: the request whose slice keeps it
  std::vector<Request*> users;   // running requests that start from it or keep it (it is not evictable)
  uint64_t last_used = 0;
};

class PrefixCache {
 public:
  // How many cuts of earlier prompts it remembers (32 bytes each) to find where prompts diverge.
  static constexpr size_t kSeenCuts = 1 << 16;

  PrefixCache(const ModelConfig& config, Precision precision, std::vector<LayerRange> ranges);

  // The stages' budgets for kept prefixes (AssignResponse.prefix_cache_bytes); the cache is on only
  // when every stage has one.
  void SetBudget(size_t stage, int64_t bytes) { budget_[stage] = bytes; }
  bool enabled() const;
  int64_t budget(size_t stage) const { return budget_[stage]; }

  struct Plan {
    std::shared_ptr<PrefixEntry> from;  // the longest kept (or being made) prefix of the prompt
    std::vector<PrefixCut> saves;       // cuts to keep, increasing: its last, and where it leaves an earlier prompt
  };
  // What `r` would do; changes nothing. A score request never starts from a prefix (it needs every
  // position's log-probabilities) but may keep some.
  Plan PlanFor(const Request& r) const;
  // Bytes `r` holds alone on each stage under `plan` (see the header comment), given `need`, its whole
  // sequence's bytes per stage.
  std::vector<int64_t> OwnBytes(const Plan& plan, const std::vector<int64_t>& need) const;
  // Bytes the plan's new prefixes add per stage.
  std::vector<int64_t> NewBytes(const Plan& plan) const;

  // Bytes kept (or being made) per stage, and what eviction could free of them, `keep` aside.
  int64_t bytes(size_t stage) const { return bytes_[stage]; }
  int64_t EvictableBytes(size_t stage, const PrefixEntry* keep) const;
  // Evicts unused prefixes, least recently used first, until `fits` holds or none is left; `keep` stays.
  template <typename Fits>
  void EvictUntil(const Fits& fits, const PrefixEntry* keep);
  // Whether the plan's new prefixes fit the stages' prefix budgets (evicting unused ones).
  bool MakeRoomForSaves(const Plan& plan);

  // `r` is admitted with `plan`: it starts from plan.from and makes the new prefixes.
  void Commit(Request& r, Plan plan);
  // `r` is done: it uses its prefixes no more. A prefix it was making passes to another user, or goes.
  void Release(Request& r);
  // The slice of `r` ending at `end` goes down the pipe now: the prefixes it keeps there are kept.
  void OnSent(Request& r, int64_t end);

  // A new epoch: the stages keep nothing. Prefixes no running request uses are forgotten; the others are
  // made again, each by its first user in `running` (which then replays from 0).
  void OnNewEpoch(const std::vector<std::shared_ptr<Request>>& running);

  // A new epoch whose stages keep no prefixes at all (a worker came back with --prefix-cache-budget 0):
  // everything is forgotten and every running request replays from 0.
  void Clear(const std::vector<std::shared_ptr<Request>>& running);

  // Keys the stages must forget (evicted since the last call).
  std::vector<uint64_t> TakeDrops() { return std::exchange(drops_, {}); }
  bool drops_pending() const { return !drops_.empty(); }

  size_t entries() const { return by_digest_.size(); }
  int64_t evictions() const { return evictions_; }

 private:
  std::shared_ptr<PrefixEntry> Find(const std::string& digest) const;
  // What a prefix of `length` positions costs `stage` (KvBytesAtLength on its layers).
  int64_t BytesAt(size_t stage, int64_t length) const;
  void Erase(const std::shared_ptr<PrefixEntry>& e, bool evicted);
  void Remember(const std::vector<PrefixCut>& cuts);
  void Touch(PrefixEntry& e) { e.last_used = ++clock_; }

  const ModelConfig config_;
  const Precision precision_;
  const std::vector<LayerRange> ranges_;
  std::vector<int64_t> budget_, bytes_;
  std::unordered_map<std::string, std::shared_ptr<PrefixEntry>> by_digest_;
  std::list<std::string> seen_;  // cuts of earlier prompts, most recent first
  std::unordered_map<std::string, std::list<std::string>::iterator> seen_at_;
  std::vector<uint64_t> drops_;
  uint64_t next_key_ = 1;
  uint64_t clock_ = 0;
  int64_t evictions_ = 0;
};

template <typename Fits>
void PrefixCache::EvictUntil(const Fits& fits, const PrefixEntry* keep) {
  while (!fits()) {
    std::shared_ptr<PrefixEntry> oldest;
    for (const auto& [digest, e] : by_digest_) {
      if (e.get() == keep || !e->users.empty()) continue;
      if (oldest == nullptr || e->last_used < oldest->last_used) oldest = e;
    }
    if (oldest == nullptr) return;
    Erase(oldest, true);
  }
}

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_SCHEDULING_PREFIX_CACHE_H_
