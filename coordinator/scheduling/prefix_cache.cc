#include "coordinator/scheduling/prefix_cache.h"

#include <algorithm>
#include <utility>

#include "engine/model/kv_bytes.h"

namespace layerpipe {
namespace {

void Unuse(PrefixEntry& e, const Request* r) {
  e.users.erase(std::remove(e.users.begin(), e.users.end(), r), e.users.end());
}

// `r` waited to start from `e`, whose maker is gone: it makes `e` itself, from position 0. Its own
// bytes do not change (it shares e's pages either way).
void HandOver(Request& r, std::shared_ptr<PrefixEntry> e) {  // by value: it may be r.prefix_from
  e->maker = &r;
  if (r.prefix_from == e) r.prefix_from.reset();
  auto at = std::find_if(r.prefix_saves.begin(), r.prefix_saves.end(),
                         [&](const std::shared_ptr<PrefixEntry>& s) { return s->length > e->length; });
  r.prefix_saves.insert(at, e);
  r.fed = r.sent = 0;
}

}  // namespace

PrefixCache::PrefixCache(const ModelConfig& config, Precision precision, std::vector<LayerRange> ranges)
    : config_(config),
      precision_(precision),
      ranges_(std::move(ranges)),
      budget_(ranges_.size(), 0),
      bytes_(ranges_.size(), 0) {}

int64_t PrefixCache::BytesAt(size_t stage, int64_t length) const {
  return KvBytesAtLength(config_, ranges_[stage].begin, ranges_[stage].end, precision_, length);
}

bool PrefixCache::enabled() const {
  return std::all_of(budget_.begin(), budget_.end(), [](int64_t b) { return b > 0; });
}

std::shared_ptr<PrefixEntry> PrefixCache::Find(const std::string& digest) const {
  auto it = by_digest_.find(digest);
  return it == by_digest_.end() ? nullptr : it->second;
}

PrefixCache::Plan PrefixCache::PlanFor(const Request& r) const {
  Plan plan;
  const std::vector<PrefixCut>& cuts = r.prefix_cuts;
  if (!enabled() || cuts.empty()) return plan;
  // The longest cut kept already (or being made): a generation starts there, and only longer ones are new.
  int longest = -1;
  for (int i = static_cast<int>(cuts.size()) - 1; i >= 0 && longest < 0; --i) {
    if (auto e = Find(cuts[i].digest); e != nullptr) {
      longest = i;
      if (r.kind == RequestKind::kGenerate) plan.from = std::move(e);
    }
  }
  // Where this prompt leaves one seen before: the next prompt like either finds its start there.
  for (int i = static_cast<int>(cuts.size()) - 2; i > longest; --i) {
    if (seen_at_.count(cuts[i].digest) != 0 && Find(cuts[i].digest) == nullptr) {
      plan.saves.push_back(cuts[i]);
      break;
    }
  }
  if (static_cast<int>(cuts.size()) - 1 > longest) plan.saves.push_back(cuts.back());
  return plan;
}

std::vector<int64_t> PrefixCache::OwnBytes(const Plan& plan, const std::vector<int64_t>& need) const {
  int64_t cut = plan.from ? plan.from->length : 0;
  if (!plan.saves.empty()) cut = std::max(cut, plan.saves.back().length);
  std::vector<int64_t> own = need;
  for (size_t s = 0; s < ranges_.size(); ++s) {
    own[s] -= KvSharedBytesAtCut(config_, ranges_[s].begin, ranges_[s].end, precision_, cut);
  }
  return own;
}

std::vector<int64_t> PrefixCache::NewBytes(const Plan& plan) const {
  std::vector<int64_t> add(ranges_.size(), 0);
  for (const PrefixCut& c : plan.saves) {
    for (size_t s = 0; s < ranges_.size(); ++s) {
      add[s] += BytesAt(s, c.length);
    }
  }
  return add;
}

int64_t PrefixCache::EvictableBytes(size_t stage, const PrefixEntry* keep) const {
  int64_t total = 0;
  for (const auto& [digest, e] : by_digest_) {
    if (e.get() != keep && e->users.empty()) total += e->bytes[stage];
  }
  return total;
}

bool PrefixCache::MakeRoomForSaves(const Plan& plan) {
  const std::vector<int64_t> add = NewBytes(plan);
  auto fits = [&] {
    for (size_t s = 0; s < ranges_.size(); ++s) {
      if (bytes_[s] + add[s] > budget_[s]) return false;
    }
    return true;
  };
  EvictUntil(fits, plan.from.get());
  return fits();
}

void PrefixCache::Commit(Request& r, Plan plan) {
  r.prefix_from = std::move(plan.from);
  r.prefix_saves.clear();
  if (r.prefix_from) {
    r.prefix_from->users.push_back(&r);
    Touch(*r.prefix_from);
  }
  for (PrefixCut& c : plan.saves) {
    auto e = std::make_shared<PrefixEntry>();
    e->key = next_key_++;
    e->length = c.length;
    e->digest = std::move(c.digest);
    for (size_t s = 0; s < ranges_.size(); ++s) {
      e->bytes.push_back(BytesAt(s, c.length));
      bytes_[s] += e->bytes.back();
    }
    e->maker = &r;
    e->users.push_back(&r);
    Touch(*e);
    by_digest_[e->digest] = e;
    r.prefix_saves.push_back(std::move(e));
  }
  Remember(r.prefix_cuts);
  r.fed = r.sent = r.start();
}

void PrefixCache::Release(Request& r) {
  std::vector<std::shared_ptr<PrefixEntry>> used = std::move(r.prefix_saves);
  r.prefix_saves.clear();
  if (r.prefix_from) used.push_back(std::move(r.prefix_from));
  r.prefix_from.reset();
  for (const std::shared_ptr<PrefixEntry>& e : used) {
    Unuse(*e, &r);
    Touch(*e);
    if (e->kept || e->maker != &r) continue;
    if (e->users.empty()) {
      Erase(e, false);  // never sent: no stage holds it
    } else {
      HandOver(*e->users.front(), e);
    }
  }
}

void PrefixCache::OnSent(Request& r, int64_t end) {
  for (const std::shared_ptr<PrefixEntry>& e : r.prefix_saves) {
    if (e->length == end && !e->kept) {
      e->kept = true;
      e->maker = nullptr;
    }
  }
}

void PrefixCache::OnNewEpoch(const std::vector<std::shared_ptr<Request>>& running) {
  drops_.clear();  // the new stages keep nothing to drop
  std::vector<std::shared_ptr<PrefixEntry>> unused;
  for (auto& [digest, e] : by_digest_) {
    e->kept = false;
    e->maker = nullptr;
    if (e->users.empty()) unused.push_back(e);
  }
  for (const auto& e : unused) Erase(e, false);
  for (const auto& r : running) {
    for (const auto& e : r->prefix_saves) {
      if (e->maker == nullptr) e->maker = r.get();
    }
  }
  for (const auto& r : running) {
    if (r->prefix_from && r->prefix_from->maker == nullptr) HandOver(*r, r->prefix_from);
  }
}

void PrefixCache::Clear(const std::vector<std::shared_ptr<Request>>& running) {
  for (const auto& r : running) {
    r->prefix_from.reset();
    r->prefix_saves.clear();
    r->fed = r->sent = 0;
  }
  by_digest_.clear();
  bytes_.assign(bytes_.size(), 0);
  drops_.clear();
}

void PrefixCache::Erase(const std::shared_ptr<PrefixEntry>& e, bool evicted) {
  for (size_t s = 0; s < ranges_.size(); ++s) bytes_[s] -= e->bytes[s];
  if (evicted) {
    drops_.push_back(e->key);
    ++evictions_;
  }
  by_digest_.erase(e->digest);
}

void PrefixCache::Remember(const std::vector<PrefixCut>& cuts) {
  for (const PrefixCut& c : cuts) {
    auto it = seen_at_.find(c.digest);
    if (it != seen_at_.end()) {
      seen_.splice(seen_.begin(), seen_, it->second);
      continue;
    }
    seen_.push_front(c.digest);
    seen_at_[c.digest] = seen_.begin();
    if (seen_.size() > kSeenCuts) {
      seen_at_.erase(seen_.back());
      seen_.pop_back();
    }
  }
}

}  // namespace layerpipe

namespace layerpipe {

int64_t Request::start() const { return prefix_from ? prefix_from->length : 0; }

}  // namespace layerpipe
