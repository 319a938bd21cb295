#include "coordinator/scheduling/kv_admission.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/model/kv_bytes.h"

namespace layerpipe {

KvAdmission::KvAdmission(const ModelConfig& config, Precision precision, std::vector<Stage> stages,
                         int max_bypass)
    : config_(config), precision_(precision), max_bypass_(max_bypass), stages_(std::move(stages)) {}

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
  r->kv_reserved = *std::move(need);
  queue_.push_back(std::move(r));
  return absl::OkStatus();
}

bool KvAdmission::paused() const {
  return std::any_of(stages_.begin(), stages_.end(), [](const Stage& s) { return s.draining; });
}

bool KvAdmission::Fits(const std::vector<int64_t>& need) const {
  for (size_t s = 0; s < stages_.size(); ++s) {
    if (stages_[s].reserved + need[s] > stages_[s].capacity) return false;
  }
  return true;
}

std::vector<std::shared_ptr<Request>> KvAdmission::AdmitWaiting() {
  std::vector<std::shared_ptr<Request>> admitted;
  if (paused()) return admitted;
  std::vector<Request*> passed;  // waiting requests ahead of the current one that do not fit yet
  for (auto it = queue_.begin(); it != queue_.end();) {
    Request& r = **it;
    if (!Fits(r.kv_reserved)) {
      // One that was passed often enough holds everything behind it.
      if (r.bypassed >= max_bypass_) break;
      passed.push_back(&r);
      ++it;
      continue;
    }
    for (Request* p : passed) ++p->bypassed;
    for (size_t s = 0; s < stages_.size(); ++s) stages_[s].reserved += r.kv_reserved[s];
    admitted.push_back(std::move(*it));
    it = queue_.erase(it);
  }
  return admitted;
}

void KvAdmission::Release(const Request& r) {
  for (size_t s = 0; s < stages_.size(); ++s) stages_[s].reserved -= r.kv_reserved[s];
}

bool KvAdmission::Withdraw(const std::shared_ptr<Request>& r) {
  auto it = std::find(queue_.begin(), queue_.end(), r);
  if (it == queue_.end()) return false;
  queue_.erase(it);
  return true;
}

std::deque<std::shared_ptr<Request>> KvAdmission::TakeQueue() { return std::exchange(queue_, {}); }

}  // namespace layerpipe
