// The prefixes one stage keeps for the prefix cache: snapshots of its layers' caches (PrefixSnapshot)
// under the keys the coordinator names, inside a byte budget of their own, the least recently used
// evicted first. A sequence started from a snapshot shares its whole pages, so evicting one never
// frees memory a running sequence still reads (the pages live while anyone holds them).
#ifndef LAYERPIPE_WORKER_PREFIX_STORE_H_
#define LAYERPIPE_WORKER_PREFIX_STORE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/backend/sequence_state.h"

namespace layerpipe {

class PrefixStore {
 public:
  struct Kept {
    std::unique_ptr<PrefixSnapshot> snapshot;
    // The last stage only: the ids the prefix fed (the repetition penalty counts them).
    std::vector<int32_t> history;
  };

  // budget_bytes 0: the cache is off (Put keeps nothing).
  explicit PrefixStore(int64_t budget_bytes) : budget_(budget_bytes) {}

  // Keeps `snapshot` under `key` (replacing one kept there), evicting the least recently used until it
  // fits. False, keeping nothing, when it alone is over the budget.
  bool Put(uint64_t key, std::unique_ptr<PrefixSnapshot> snapshot, std::vector<int32_t> history = {});
  // What is kept under `key`, now the most recently used; null when nothing is.
  const Kept* Get(uint64_t key);
  // Forgets `key` (the coordinator evicted it); false when nothing was kept there.
  bool Drop(uint64_t key);
  // Forgets everything (a new epoch: the coordinator's keys of the old one mean nothing now).
  void Clear();

  int64_t bytes() const { return bytes_; }
  int64_t budget() const { return budget_; }
  size_t size() const { return entries_.size(); }
  int64_t evictions() const { return evictions_; }

 private:
  struct Entry {
    uint64_t key;
    Kept kept;
    int64_t bytes;
  };
  void Erase(std::list<Entry>::iterator it);

  const int64_t budget_;
  int64_t bytes_ = 0;
  int64_t evictions_ = 0;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<uint64_t, std::list<Entry>::iterator> entries_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_WORKER_PREFIX_STORE_H_
