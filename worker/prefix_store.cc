#include "worker/prefix_store.h"

namespace layerpipe {

void PrefixStore::Erase(std::list<Entry>::iterator it) {
  bytes_ -= it->bytes;
  entries_.erase(it->key);
  lru_.erase(it);
}

bool PrefixStore::Put(uint64_t key, std::unique_ptr<PrefixSnapshot> snapshot, std::vector<int32_t> history) {
  if (auto it = entries_.find(key); it != entries_.end()) Erase(it->second);
  if (snapshot == nullptr) return false;
  const int64_t b = static_cast<int64_t>(snapshot->bytes());
  if (b > budget_) return false;
  while (bytes_ + b > budget_ && !lru_.empty()) {
    Erase(std::prev(lru_.end()));
    ++evictions_;
  }
  lru_.push_front(Entry{key, Kept{std::move(snapshot), std::move(history)}, b});
  entries_[key] = lru_.begin();
  bytes_ += b;
  return true;
}

const PrefixStore::Kept* PrefixStore::Get(uint64_t key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return &it->second->kept;
}

bool PrefixStore::Drop(uint64_t key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  Erase(it->second);
  return true;
}

void PrefixStore::Clear() {
  lru_.clear();
  entries_.clear();
  bytes_ = 0;
}

}  // namespace layerpipe
