#include "common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

namespace layerpipe {
namespace {

bool ValidName(std::string_view name, bool colons) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colons && c == ':') ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

const char* TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Adds `amount` to an atomic double (compare-and-swap: fetch_add on doubles is not lock-free everywhere).
void AtomicAdd(std::atomic<double>& target, double amount) {
  double old = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(old, old + amount, std::memory_order_relaxed)) {
  }
}

}  // namespace

void Counter::Increment(double amount) {
  if (!(amount >= 0)) return;  // also NaN
  AtomicAdd(value_, amount);
}

void Gauge::Add(double amount) { AtomicAdd(value_, amount); }

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]) || (i > 0 && bounds_[i] <= bounds_[i - 1])) {
      throw std::invalid_argument("histogram bucket bounds must be finite and strictly increasing");
    }
  }
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  // The first bucket whose upper bound is >= value ("le" is inclusive).
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  std::lock_guard<std::mutex> lock(mu_);
  s.cumulative.resize(counts_.size());
  uint64_t running = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    running += counts_[i];
    s.cumulative[i] = running;
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

std::vector<double> ExponentialBuckets(double start, double factor, int n) {
  std::vector<double> out;
  double b = start;
  for (int i = 0; i < n; ++i, b *= factor) out.push_back(b);
  return out;
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, res.ptr);
}

std::string FormatMetricLabels(const MetricLabels& sorted_labels) {
  if (sorted_labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < sorted_labels.size(); ++i) {
    if (i > 0) out += ',';
    out += sorted_labels[i].first;
    out += "=\"";
    for (char c : sorted_labels[i].second) {
      if (c == '\\') {
        out += "\\\\";
      } else if (c == '"') {
        out += "\\\"";
      } else if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
    out += '"';
  }
  out += '}';
  return out;
}

MetricsRegistry::Series& MetricsRegistry::SeriesFor(std::string_view name, std::string_view help, MetricType type,
                                                    const MetricLabels& labels,
                                                    const std::vector<double>* upper_bounds) {
  if (!ValidName(name, /*colons=*/true)) {
    throw std::invalid_argument("invalid metric name \"" + std::string(name) + "\"");
  }
  MetricLabels sorted = labels;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    const std::string& l = sorted[i].first;
    if (!ValidName(l, /*colons=*/false) || l.rfind("__", 0) == 0 || (type == MetricType::kHistogram && l == "le") ||
        (i > 0 && sorted[i - 1].first == l)) {
      throw std::invalid_argument("invalid or repeated label name \"" + l + "\" on metric " + std::string(name));
    }
  }
  auto it = families_.find(name);
  if (it == families_.end()) {
    Family f;
    f.help = std::string(help);
    f.type = type;
    if (upper_bounds != nullptr) f.upper_bounds = *upper_bounds;
    it = families_.emplace(std::string(name), std::move(f)).first;
  }
  Family& f = it->second;
  if (f.type != type || (upper_bounds != nullptr && f.upper_bounds != *upper_bounds)) {
    throw std::invalid_argument("metric " + std::string(name) + " registered again with another type or buckets");
  }
  const std::string key = FormatMetricLabels(sorted);
  auto [sit, fresh] = f.series.try_emplace(key);
  if (fresh) sit->second.labels = std::move(sorted);
  return sit->second;
}

Counter& MetricsRegistry::GetCounter(std::string_view name, std::string_view help, const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = SeriesFor(name, help, MetricType::kCounter, labels, nullptr);
  if (s.read) throw std::invalid_argument("metric " + std::string(name) + " is a callback");
  if (!s.counter) s.counter = std::make_unique<Counter>();
  return *s.counter;
}

Gauge& MetricsRegistry::GetGauge(std::string_view name, std::string_view help, const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = SeriesFor(name, help, MetricType::kGauge, labels, nullptr);
  if (s.read) throw std::invalid_argument("metric " + std::string(name) + " is a callback");
  if (!s.gauge) s.gauge = std::make_unique<Gauge>();
  return *s.gauge;
}

Histogram& MetricsRegistry::GetHistogram(std::string_view name, std::string_view help,
                                         const std::vector<double>& upper_bounds, const MetricLabels& labels) {
  auto made = std::make_unique<Histogram>(upper_bounds);  // checks the bounds before anything is registered
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = SeriesFor(name, help, MetricType::kHistogram, labels, &upper_bounds);
  if (!s.histogram) s.histogram = std::move(made);
  return *s.histogram;
}

void MetricsRegistry::AddCallback(std::string_view name, std::string_view help, MetricType type,
                                  const MetricLabels& labels, std::function<double()> read) {
  if (type == MetricType::kHistogram) throw std::invalid_argument("histograms cannot be callbacks");
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = SeriesFor(name, help, type, labels, nullptr);
  if (s.counter || s.gauge) throw std::invalid_argument("metric " + std::string(name) + " is not a callback");
  s.read = std::make_shared<const std::function<double()>>(std::move(read));
}

std::string MetricsRegistry::Render() const {
  // Taken under the lock: what to render. Series are never removed and live in map nodes, so the
  // pointers stay valid after the lock is let go; callbacks are then run without it.
  struct SeriesView {
    const MetricLabels* labels;
    const Counter* counter;
    const Gauge* gauge;
    const Histogram* histogram;
    std::shared_ptr<const std::function<double()>> read;
  };
  struct FamilyView {
    const std::string* name;
    const Family* family;
    std::vector<SeriesView> series;
  };
  std::vector<FamilyView> families;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, f] : families_) {
      FamilyView fv{&name, &f, {}};
      for (const auto& [key, s] : f.series) {
        fv.series.push_back({&s.labels, s.counter.get(), s.gauge.get(), s.histogram.get(), s.read});
      }
      families.push_back(std::move(fv));
    }
  }

  std::string out;
  for (const FamilyView& fv : families) {
    const std::string& name = *fv.name;
    out += "# HELP " + name + " " + EscapeHelp(fv.family->help) + "\n";
    out += "# TYPE " + name + " " + TypeName(fv.family->type) + "\n";
    for (const SeriesView& s : fv.series) {
      if (s.histogram != nullptr) {
        const Histogram::Snapshot snap = s.histogram->Read();
        const std::vector<double>& bounds = s.histogram->upper_bounds();
        for (size_t i = 0; i <= bounds.size(); ++i) {
          MetricLabels with_le = *s.labels;
          with_le.emplace_back("le", i < bounds.size() ? FormatMetricValue(bounds[i]) : "+Inf");
          out += name + "_bucket" + FormatMetricLabels(with_le) + " " + std::to_string(snap.cumulative[i]) + "\n";
        }
        out += name + "_sum" + FormatMetricLabels(*s.labels) + " " + FormatMetricValue(snap.sum) + "\n";
        out += name + "_count" + FormatMetricLabels(*s.labels) + " " + std::to_string(snap.count) + "\n";
        continue;
      }
      double value = 0;
      if (s.read) {
        value = (*s.read)();
      } else if (s.counter != nullptr) {
        value = s.counter->Value();
      } else if (s.gauge != nullptr) {
        value = s.gauge->Value();
      } else {
        continue;  // every path that creates a series fills it; nothing to show otherwise
      }
      out += name + FormatMetricLabels(*s.labels) + " " + FormatMetricValue(value) + "\n";
    }
  }
  return out;
}

}  // namespace layerpipe
