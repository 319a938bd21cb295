// Events per second over a recent window (e.g. tokens/s over the last 10 s), for a gauge read at
// scrape time. Counts go into fixed time buckets, so memory is constant however many events arrive.
#ifndef LAYERPIPE_COMMON_SLIDING_RATE_H_
#define LAYERPIPE_COMMON_SLIDING_RATE_H_

#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

namespace layerpipe {

class SlidingRate {
 public:
  using Clock = std::chrono::steady_clock;

  // The rate covers the last `window`, kept in `buckets` slices of window/buckets each.
  explicit SlidingRate(Clock::duration window = std::chrono::seconds(10), int buckets = 10,
                       Clock::time_point start = Clock::now());

  void Add(double amount, Clock::time_point now = Clock::now());
  // Sum of what was added over the covered span / that span. The span is the window (less the
  // unelapsed part of the current bucket), or the time since `start` when that is shorter.
  double PerSecond(Clock::time_point now = Clock::now()) const;

 private:
  int64_t BucketIndex(Clock::time_point t) const;

  const Clock::time_point start_;
  const Clock::duration width_;
  const int buckets_;
  mutable std::mutex mu_;
  // Slot i % buckets_ holds bucket i's total while index_[slot] == i.
  std::vector<int64_t> index_;
  std::vector<double> total_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_COMMON_SLIDING_RATE_H_
