// A small Prometheus metrics registry: counters, gauges and fixed-bucket histograms, optionally
// labelled, rendered in the text exposition format 0.0.4. Updating a metric is lock-free (counters,
// gauges) or takes the metric's own short lock (histograms), never the registry's, so hot paths may
// update metrics while holding their own locks.
#ifndef LAYERPIPE_COMMON_METRICS_H_
#define LAYERPIPE_COMMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace layerpipe {

enum class MetricType { kCounter, kGauge, kHistogram };

// name → value. Order does not matter: a label set is identified (and rendered) sorted by name.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  // Negative or NaN amounts are ignored: a counter only goes up.
  void Increment(double amount = 1.0);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double amount);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // `upper_bounds` strictly increasing and finite; the +Inf bucket is implicit.
  explicit Histogram(std::vector<double> upper_bounds);

  // NaN is ignored.
  void Observe(double value);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // per upper bound, then +Inf (== count)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Read() const;
  const std::vector<double>& upper_bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Bucket bounds start, start·factor, ... (`n` of them).
std::vector<double> ExponentialBuckets(double start, double factor, int n);

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // The metric `name` with `labels`, created on first use; later calls with the same name and
  // labels return the same object, which lives as long as the registry. A name reused with another
  // type (or histogram buckets), an invalid metric or label name, or a label set that repeats a name
  // throws std::invalid_argument: those are programming errors.
  Counter& GetCounter(std::string_view name, std::string_view help, const MetricLabels& labels = {});
  Gauge& GetGauge(std::string_view name, std::string_view help, const MetricLabels& labels = {});
  Histogram& GetHistogram(std::string_view name, std::string_view help, const std::vector<double>& upper_bounds,
                          const MetricLabels& labels = {});

  // A counter or gauge whose value `read` computes at scrape time (e.g. from a component's own
  // state). `read` runs without the registry's lock held, so it may take the component's locks even
  // where that component updates metrics under them. It must stay callable for the registry's life.
  // Registering the same name and labels again replaces the callback.
  void AddCallback(std::string_view name, std::string_view help, MetricType type, const MetricLabels& labels,
                   std::function<double()> read);

  // The whole registry in the text exposition format 0.0.4: families sorted by name, each with its
  // HELP and TYPE lines, then its series sorted by label set.
  std::string Render() const;

 private:
  struct Series {
    MetricLabels labels;  // sorted by name
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
    std::shared_ptr<const std::function<double()>> read;  // callback series
  };
  struct Family {
    std::string help;
    MetricType type;
    std::vector<double> upper_bounds;  // histograms
    std::map<std::string, Series> series;  // by rendered label set
  };

  // The series for (name, labels), created if new; checks names and that the type matches.
  Series& SeriesFor(std::string_view name, std::string_view help, MetricType type, const MetricLabels& labels,
                    const std::vector<double>* upper_bounds);

  mutable std::mutex mu_;
  std::map<std::string, Family, std::less<>> families_;
};

// Exposition helpers, exposed for tests.
// Shortest text that reads back as the same double; "+Inf", "-Inf", "NaN".
std::string FormatMetricValue(double value);
// `{a="x",b="y"}` with \\, \" and \n escaped in values; empty for no labels.
std::string FormatMetricLabels(const MetricLabels& sorted_labels);

}  // namespace layerpipe

#endif  // LAYERPIPE_COMMON_METRICS_H_
