// A least-recently-used cache bounded by entries and by bytes: the finished jobs a coordinator keeps in
// memory in front of its job store, so that memory stays flat however many jobs have finished.
#ifndef LAYERPIPE_COORDINATOR_JOBS_BOUNDED_CACHE_H_
#define LAYERPIPE_COORDINATOR_JOBS_BOUNDED_CACHE_H_

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

namespace layerpipe {

// Not thread-safe: the caller holds its own lock. `bytes` of an entry is the caller's estimate of what the
// value holds; the key's own bytes are added to it.
template <typename V>
class BoundedCache {
 public:
  BoundedCache(int64_t max_entries, int64_t max_bytes) : max_entries_(max_entries), max_bytes_(max_bytes) {}

  // Inserts or replaces `key`, most recent, then evicts least recent entries until both bounds hold. An
  // entry larger than max_bytes on its own is not kept (and a present one under the key is dropped).
  void Put(const std::string& key, V value, int64_t bytes) {
    Erase(key);
    const int64_t size = bytes + static_cast<int64_t>(key.size());
    if (size > max_bytes_ || max_entries_ <= 0) return;
    order_.push_front(Entry{key, std::move(value), size});
    index_[key] = order_.begin();
    bytes_ += size;
    while (static_cast<int64_t>(order_.size()) > max_entries_ || bytes_ > max_bytes_) Evict();
  }

  // The value, made most recent; nullopt when absent.
  std::optional<V> Get(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return std::nullopt;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->value;
  }

  void Erase(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return;
    bytes_ -= it->second->bytes;
    order_.erase(it->second);
    index_.erase(it);
  }

  // Drops every entry `pred(value)` holds for.
  template <typename Pred>
  void EraseIf(Pred pred) {
    for (auto it = order_.begin(); it != order_.end();) {
      if (!pred(it->value)) {
        ++it;
        continue;
      }
      bytes_ -= it->bytes;
      index_.erase(it->key);
      it = order_.erase(it);
    }
  }

  int64_t entries() const { return static_cast<int64_t>(order_.size()); }
  int64_t bytes() const { return bytes_; }

 private:
  struct Entry {
    std::string key;
    V value;
    int64_t bytes;
  };

  void Evict() {
    const Entry& last = order_.back();
    bytes_ -= last.bytes;
    index_.erase(last.key);
    order_.pop_back();
  }

  const int64_t max_entries_, max_bytes_;
  std::list<Entry> order_;  // most recent first
  std::unordered_map<std::string, typename std::list<Entry>::iterator> index_;
  int64_t bytes_ = 0;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_JOBS_BOUNDED_CACHE_H_
