#include "coordinator/scheduling/kv_admission.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/model/kv_bytes.h"

namespace layerpipe {

KvAdmission::KvAdmission(const ModelConfig& config, Precision precision, std::vector<Stage> stages,
                         int max_bypass)
    : config_(config),
      precision_(precision),
      max_bypass_(max_bypass),
      stages_(std::move(stages)),
      cache_(config_, precision_, [this] {
        std::vector<LayerRange> ranges;
        for (const Stage& s : stages_) ranges.push_back(s.range);
        return ranges;
      }()) {}

absl::StatusOr<std::vector<int64_t>> KvAdmission::Need(int64_t tokens) const {
  std::vector<int64_t> need(stages_.size());
  for (size_t s = 0; s < stages_.size(); ++s) {
    const Stage& st = stages_[s];
    need[s] = KvBytesAtLength(config_, st.range.begin, st.range.end, precision_, tokens);
    if (need[s] > st.capacity) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "a sequence of ", tokens, " tokens needs ", need[s], " bytes of KV cache on stage ", s, " (", st.address,
          ", layers ", st.range.begin, "-", st.range.end - 1, ") but its capacity is ", st.capacity, " bytes"));
    }
  }
  return need;
}

absl::Status KvAdmission::Enqueue(std::shared_ptr<Request> r) {
  auto need = Need(r->SequenceTokens());
  if (!need.ok()) return need.status();
  r->kv_need = *std::move(need);
  queue_.push_back(std::move(r));
  return absl::OkStatus();
}

bool KvAdmission::paused() const {
  return std::any_of(stages_.begin(), stages_.end(), [](const Stage& s) { return s.draining; });
}

bool KvAdmission::TryAdmit(Request& r) {
  PrefixCache::Plan plan = cache_.PlanFor(r);
  // Keeping new prefixes is optional: without them the request may fit where it otherwise would not.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt == 1) {
      if (plan.saves.empty()) break;
      plan.saves.clear();
    }
    const std::vector<int64_t> own = cache_.OwnBytes(plan, r.kv_need);
    const std::vector<int64_t> add = cache_.NewBytes(plan);
    auto fits = [&](bool evicting_all) {
      for (size_t s = 0; s < stages_.size(); ++s) {
        const int64_t kept = cache_.bytes(s) - (evicting_all ? cache_.EvictableBytes(s, plan.from.get()) : 0);
        if (stages_[s].reserved + kept + own[s] + add[s] > stages_[s].capacity) return false;
        if (add[s] > 0 && kept + add[s] > cache_.budget(s)) return false;
      }
      return true;
    };
    if (!fits(true)) continue;
    cache_.EvictUntil([&] { return fits(false); }, plan.from.get());
    r.kv_reserved = own;
    for (size_t s = 0; s < stages_.size(); ++s) stages_[s].reserved += own[s];
    cache_.Commit(r, std::move(plan));
    return true;
  }
  return false;
}

std::vector<std::shared_ptr<Request>> KvAdmission::AdmitWaiting() {
  std::vector<std::shared_ptr<Request>> admitted;
  if (paused()) return admitted;
  std::vector<Request*> passed;  // waiting requests ahead of the current one that do not fit yet
  for (auto it = queue_.begin(); it != queue_.end();) {
    Request& r = **it;
    if (!TryAdmit(r)) {
      // One that was passed often enough holds everything behind it.
      if (r.bypassed >= max_bypass_) break;
      passed.push_back(&r);
      ++it;
      continue;
    }
    for (Request* p : passed) ++p->bypassed;
    admitted.push_back(std::move(*it));
    it = queue_.erase(it);
  }
  return admitted;
}

void KvAdmission::Release(Request& r) {
  for (size_t s = 0; s < stages_.size(); ++s) stages_[s].reserved -= r.kv_reserved[s];
  r.kv_reserved.assign(r.kv_reserved.size(), 0);
  cache_.Release(r);
}

bool KvAdmission::Withdraw(const std::shared_ptr<Request>& r) {
  auto it = std::find(queue_.begin(), queue_.end(), r);
  if (it == queue_.end()) return false;
  queue_.erase(it);
  return true;
}

void KvAdmission::TurnCacheOff(const std::vector<std::shared_ptr<Request>>& running) {
  for (const auto& r : running) {
    for (size_t s = 0; s < stages_.size() && s < r->kv_reserved.size(); ++s) {
      stages_[s].reserved += r->kv_need[s] - r->kv_reserved[s];
    }
    r->kv_reserved = r->kv_need;
  }
  cache_.Clear(running);
}

std::deque<std::shared_ptr<Request>> KvAdmission::TakeQueue() { return std::exchange(queue_, {}); }

}  // namespace layerpipe
