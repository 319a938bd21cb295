#include "common/sliding_rate.h"

#include <algorithm>

namespace layerpipe {

SlidingRate::SlidingRate(Clock::duration window, int buckets, Clock::time_point start)
    : start_(start),
      width_(std::max<Clock::duration>(window / std::max(buckets, 1), Clock::duration(1))),
      buckets_(std::max(buckets, 1)),
      index_(buckets_, -1),
      total_(buckets_, 0.0) {}

int64_t SlidingRate::BucketIndex(Clock::time_point t) const {
  return t <= start_ ? 0 : static_cast<int64_t>((t - start_) / width_);
}

void SlidingRate::Add(double amount, Clock::time_point now) {
  const int64_t i = BucketIndex(now);
  const size_t slot = static_cast<size_t>(i % buckets_);
  std::lock_guard<std::mutex> lock(mu_);
  if (index_[slot] != i) {
    if (index_[slot] > i) return;  // older than the window: already out of every rate
    index_[slot] = i;
    total_[slot] = 0;
  }
  total_[slot] += amount;
}

double SlidingRate::PerSecond(Clock::time_point now) const {
  const int64_t current = BucketIndex(now);
  const int64_t oldest = current - buckets_ + 1;
  double sum = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int s = 0; s < buckets_; ++s) {
      if (index_[s] >= oldest && index_[s] <= current) sum += total_[s];
    }
  }
  // From the start of the oldest bucket counted (or of the tracker) to now.
  const Clock::time_point from = start_ + std::max<int64_t>(oldest, 0) * width_;
  const double span = std::chrono::duration<double>(now - from).count();
  return span > 0 ? sum / span : 0.0;
}

}  // namespace layerpipe
