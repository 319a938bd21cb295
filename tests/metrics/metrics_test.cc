// The metrics registry's exposition text (byte for byte), its checks, its thread safety, the sliding
// rate, and the HTTP endpoint over a real socket.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "common/metrics_http.h"
#include "common/process_metrics.h"
#include "common/version.h"
#include "common/sliding_rate.h"
#include "gtest/gtest.h"

namespace layerpipe {
namespace {

TEST(MetricValueTest, ShortestRoundTripText) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(42), "42");
  EXPECT_EQ(FormatMetricValue(1234567), "1234567");
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(-2.5), "-2.5");
  EXPECT_EQ(FormatMetricValue(1e21), "1e+21");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatMetricValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatMetricValue(std::nan("")), "NaN");
  const double x = 0.1 + 0.2;
  EXPECT_EQ(std::stod(FormatMetricValue(x)), x);
}

TEST(MetricLabelsTest, EscapesBackslashQuoteAndNewline) {
  EXPECT_EQ(FormatMetricLabels({}), "");
  EXPECT_EQ(FormatMetricLabels({{"a", "x"}, {"b", "y"}}), R"({a="x",b="y"})");
  EXPECT_EQ(FormatMetricLabels({{"path", "C:\\dir \"q\"\nnext"}}), R"({path="C:\\dir \"q\"\nnext"})");
}

TEST(MetricsRegistryTest, RendersCountersAndGaugesExactly) {
  MetricsRegistry r;
  r.GetCounter("lp_requests_total", "Requests.", {{"kind", "generate"}, {"code", "OK"}}).Increment(3);
  r.GetCounter("lp_requests_total", "Requests.", {{"code", "CANCELLED"}, {"kind", "generate"}}).Increment();
  r.GetGauge("lp_depth", "Queue depth.\nSecond line with a \\ backslash.").Set(-1.5);
  r.GetCounter("lp_empty_total", "Never incremented.");
  EXPECT_EQ(r.Render(),
            "# HELP lp_depth Queue depth.\\nSecond line with a \\\\ backslash.\n"
            "# TYPE lp_depth gauge\n"
            "lp_depth -1.5\n"
            "# HELP lp_empty_total Never incremented.\n"
            "# TYPE lp_empty_total counter\n"
            "lp_empty_total 0\n"
            "# HELP lp_requests_total Requests.\n"
            "# TYPE lp_requests_total counter\n"
            "lp_requests_total{code=\"CANCELLED\",kind=\"generate\"} 1\n"
            "lp_requests_total{code=\"OK\",kind=\"generate\"} 3\n");
}

TEST(MetricsRegistryTest, SameNameAndLabelsIsTheSameMetric) {
  MetricsRegistry r;
  Counter& a = r.GetCounter("c_total", "h", {{"x", "1"}, {"y", "2"}});
  Counter& b = r.GetCounter("c_total", "h", {{"y", "2"}, {"x", "1"}});
  EXPECT_EQ(&a, &b);
  Counter& other = r.GetCounter("c_total", "h", {{"x", "1"}, {"y", "3"}});
  EXPECT_NE(&a, &other);
}

TEST(MetricsRegistryTest, CountersOnlyGoUp) {
  MetricsRegistry r;
  Counter& c = r.GetCounter("c_total", "h");
  c.Increment(2);
  c.Increment(-1);
  c.Increment(std::nan(""));
  EXPECT_EQ(c.Value(), 2);
  Gauge& g = r.GetGauge("g", "h");
  g.Add(5);
  g.Add(-7);
  EXPECT_EQ(g.Value(), -2);
}

TEST(MetricsRegistryTest, RendersHistogramsCumulativeWithInf) {
  MetricsRegistry r;
  // Binary fractions, so the sum is exact.
  Histogram& h = r.GetHistogram("lp_latency_seconds", "Latency.", {0.125, 0.5, 1}, {{"stage", "0"}});
  for (double v : {0.0625, 0.125, 0.25, 0.75, 0.75, 3.0}) h.Observe(v);
  h.Observe(std::nan(""));  // ignored
  EXPECT_EQ(r.Render(),
            "# HELP lp_latency_seconds Latency.\n"
            "# TYPE lp_latency_seconds histogram\n"
            "lp_latency_seconds_bucket{stage=\"0\",le=\"0.125\"} 2\n"
            "lp_latency_seconds_bucket{stage=\"0\",le=\"0.5\"} 3\n"
            "lp_latency_seconds_bucket{stage=\"0\",le=\"1\"} 5\n"
            "lp_latency_seconds_bucket{stage=\"0\",le=\"+Inf\"} 6\n"
            "lp_latency_seconds_sum{stage=\"0\"} 4.9375\n"
            "lp_latency_seconds_count{stage=\"0\"} 6\n");
  const Histogram::Snapshot s = h.Read();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 3, 5, 6}));
  EXPECT_EQ(s.count, 6u);
}

TEST(MetricsRegistryTest, HistogramWithoutLabelsAndEmpty) {
  MetricsRegistry r;
  r.GetHistogram("h_seconds", "H.", {0.5});
  EXPECT_EQ(r.Render(),
            "# HELP h_seconds H.\n"
            "# TYPE h_seconds histogram\n"
            "h_seconds_bucket{le=\"0.5\"} 0\n"
            "h_seconds_bucket{le=\"+Inf\"} 0\n"
            "h_seconds_sum 0\n"
            "h_seconds_count 0\n");
}

TEST(MetricsRegistryTest, ExponentialBuckets) {
  EXPECT_EQ(ExponentialBuckets(0.001, 10, 4), (std::vector<double>{0.001, 0.01, 0.1, 1}));
  EXPECT_EQ(ExponentialBuckets(1, 2, 3), (std::vector<double>{1, 2, 4}));
}

TEST(MetricsRegistryTest, CallbacksAreReadAtScrapeTime) {
  MetricsRegistry r;
  double depth = 1;
  r.AddCallback("q_depth", "Depth.", MetricType::kGauge, {}, [&] { return depth; });
  r.AddCallback("kv_bytes", "KV.", MetricType::kGauge, {{"kind", "full"}}, [] { return 4096.0; });
  EXPECT_EQ(r.Render(),
            "# HELP kv_bytes KV.\n# TYPE kv_bytes gauge\nkv_bytes{kind=\"full\"} 4096\n"
            "# HELP q_depth Depth.\n# TYPE q_depth gauge\nq_depth 1\n");
  depth = 7;
  EXPECT_NE(r.Render().find("q_depth 7\n"), std::string::npos);
  // Registering again replaces the callback.
  r.AddCallback("q_depth", "Depth.", MetricType::kGauge, {}, [] { return 9.0; });
  EXPECT_NE(r.Render().find("q_depth 9\n"), std::string::npos);
}

TEST(MetricsRegistryTest, CallbackMayUseTheRegistry) {
  // A callback that takes a component's lock, where the component updates metrics (and may create
  // labelled series) under that lock, must not deadlock against the registry: the registry runs
  // callbacks without its own lock.
  MetricsRegistry r;
  r.AddCallback("reads", "Reads.", MetricType::kCounter, {}, [&r] {
    r.GetCounter("created_by_callback_total", "Made while rendering.").Increment();
    return 1.0;
  });
  EXPECT_NE(r.Render().find("# TYPE reads counter\nreads 1\n"), std::string::npos);
  EXPECT_NE(r.Render().find("created_by_callback_total 1\n"), std::string::npos);
}

TEST(MetricsRegistryTest, RefusesMisuse) {
  MetricsRegistry r;
  r.GetCounter("c_total", "h");
  EXPECT_THROW(r.GetGauge("c_total", "h"), std::invalid_argument);
  EXPECT_THROW(r.GetCounter("1bad", "h"), std::invalid_argument);
  EXPECT_THROW(r.GetCounter("bad-name", "h"), std::invalid_argument);
  EXPECT_THROW(r.GetCounter("ok_total", "h", {{"bad-label", "x"}}), std::invalid_argument);
  EXPECT_THROW(r.GetCounter("ok_total", "h", {{"__reserved", "x"}}), std::invalid_argument);
  EXPECT_THROW(r.GetCounter("ok_total", "h", {{"a", "x"}, {"a", "y"}}), std::invalid_argument);
  EXPECT_THROW(r.GetHistogram("h_seconds", "h", {1}, {{"le", "x"}}), std::invalid_argument);
  EXPECT_THROW(r.GetHistogram("h2_seconds", "h", {1, 1}), std::invalid_argument);
  r.GetHistogram("h3_seconds", "h", {1, 2});
  EXPECT_THROW(r.GetHistogram("h3_seconds", "h", {1, 3}), std::invalid_argument);
  r.AddCallback("cb", "h", MetricType::kGauge, {}, [] { return 0.0; });
  EXPECT_THROW(r.GetGauge("cb", "h"), std::invalid_argument);
  EXPECT_THROW(r.AddCallback("c_total", "h", MetricType::kCounter, {}, [] { return 0.0; }), std::invalid_argument);
  // A colon is allowed in metric names, not in label names.
  EXPECT_NO_THROW(r.GetCounter("ns:ok_total", "h"));
  // Nothing half-registered shows up.
  EXPECT_EQ(r.Render().find("h2_seconds"), std::string::npos);
}

TEST(MetricsRegistryTest, ConcurrentUpdatesAndScrapes) {
  MetricsRegistry r;
  Counter& c = r.GetCounter("c_total", "h");
  Histogram& h = r.GetHistogram("h_seconds", "h", {0.5});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10000; ++i) {
        c.Increment();
        h.Observe(i % 2 == 0 ? 0.25 : 1.0);
        r.GetCounter("labelled_total", "h", {{"t", std::to_string(t)}}).Increment();
      }
    });
  }
  std::thread scraper([&] {
    for (int i = 0; i < 50; ++i) r.Render();
  });
  for (auto& t : threads) t.join();
  scraper.join();
  EXPECT_EQ(c.Value(), 40000);
  const Histogram::Snapshot s = h.Read();
  EXPECT_EQ(s.count, 40000u);
  EXPECT_EQ(s.cumulative[0], 20000u);
  EXPECT_EQ(s.sum, 20000 * 0.25 + 20000 * 1.0);
  const std::string text = r.Render();
  for (int t = 0; t < 4; ++t) {
    EXPECT_NE(text.find("labelled_total{t=\"" + std::to_string(t) + "\"} 10000\n"), std::string::npos);
  }
}

TEST(SlidingRateTest, RateOverTheWindow) {
  using namespace std::chrono_literals;
  const auto t0 = SlidingRate::Clock::time_point() + 1000s;
  SlidingRate rate(10s, 10, t0);
  EXPECT_EQ(rate.PerSecond(t0), 0);
  // Before a whole window has passed the span is the time since the start.
  rate.Add(10, t0 + 500ms);
  EXPECT_DOUBLE_EQ(rate.PerSecond(t0 + 2s), 5.0);
  // 1 event per 100 ms for 20 s: 10/s.
  for (int i = 0; i < 200; ++i) rate.Add(1, t0 + 2s + i * 100ms);
  EXPECT_NEAR(rate.PerSecond(t0 + 22s), 10.0, 1e-9);
  // Nothing for a while: the rate falls to 0 once the window has passed.
  // At 27 s the window spans seconds 18..27: buckets 18..21 hold 40 events over 9 s.
  EXPECT_NEAR(rate.PerSecond(t0 + 27s), 40.0 / 9.0, 1e-9);
  EXPECT_EQ(rate.PerSecond(t0 + 40s), 0);
  // A late event older than the window is dropped rather than overwriting a newer bucket.
  rate.Add(100, t0 + 35s);
  rate.Add(1000, t0 + 5s);
  EXPECT_NEAR(rate.PerSecond(t0 + 40s), 100 / 9.0, 1e-9);
  EXPECT_NEAR(rate.PerSecond(t0 + 40s + 500ms), 100 / 9.5, 1e-9);
}

// The value of the unlabelled sample `name` in `text`, checking its TYPE line; NaN when absent.
double SampleValue(const std::string& text, const std::string& name, const char* type) {
  if (text.find("# TYPE " + name + " " + type + "\n") == std::string::npos) return std::nan("");
  const size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return std::nan("");
  return std::stod(text.substr(at + name.size() + 2));
}

TEST(ProcessMetricsTest, ExportedWithPlausibleValues) {
  MetricsRegistry r;
  RegisterProcessMetrics(r);
  const std::string text = r.Render();
  const double rss = SampleValue(text, "process_resident_memory_bytes", "gauge");
  const double vms = SampleValue(text, "process_virtual_memory_bytes", "gauge");
  EXPECT_GT(rss, 1 << 20) << text;
  EXPECT_GE(vms, rss) << text;
  EXPECT_GE(SampleValue(text, "process_open_fds", "gauge"), 3) << text;
  const double max_fds = SampleValue(text, "process_max_fds", "gauge");
  EXPECT_GE(max_fds, SampleValue(text, "process_open_fds", "gauge")) << text;
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const double start = SampleValue(text, "process_start_time_seconds", "gauge");
  EXPECT_LE(start, now + 1) << text;  // whole clock ticks, rounded either way
  EXPECT_GT(start, now - 3600) << text;
  const double cpu = SampleValue(text, "process_cpu_seconds_total", "counter");
  EXPECT_GE(cpu, 0) << text;
  EXPECT_EQ(text.find("NaN"), std::string::npos) << text;

  // An open descriptor shows at the next scrape.
  const int fd = dup(0);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(SampleValue(r.Render(), "process_open_fds", "gauge"), SampleValue(text, "process_open_fds", "gauge") + 1);
  close(fd);

  // Burn CPU until the counter moves (clock ticks are 10 ms); give up after 10 s of wall time.
  volatile double sink = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  double later = cpu;
  while (later < cpu + 0.05 && std::chrono::steady_clock::now() < deadline) {
    for (int i = 0; i < 1000000; ++i) sink = sink + std::sqrt(static_cast<double>(i));
    later = SampleValue(r.Render(), "process_cpu_seconds_total", "counter");
  }
  EXPECT_GE(later, cpu + 0.05);
  // The start time is fixed.
  EXPECT_EQ(SampleValue(r.Render(), "process_start_time_seconds", "gauge"), start);
}

TEST(ProcessMetricsTest, ReadProcessStatsFillsEveryField) {
  const ProcessStats s = ReadProcessStats();
  ASSERT_TRUE(s.resident_memory_bytes && s.virtual_memory_bytes && s.cpu_seconds && s.open_fds && s.max_fds &&
              s.start_time_seconds);
  EXPECT_GT(*s.resident_memory_bytes, 1 << 20);
  EXPECT_GE(*s.virtual_memory_bytes, *s.resident_memory_bytes);
  EXPECT_GE(*s.open_fds, 3);
}

TEST(ProcessMetricsTest, BuildInfoHasTheVersion) {
  MetricsRegistry r;
  RegisterBuildInfo(r);
  EXPECT_EQ(r.Render(), std::string("# HELP layerpipe_build_info Always 1: the version this server was built from.\n"
                                    "# TYPE layerpipe_build_info gauge\n"
                                    "layerpipe_build_info{version=\"") +
                            Version() + "\"} 1\n");
  EXPECT_STRNE(Version(), "");
  EXPECT_STRNE(Version(), "unknown");
}

// One HTTP/1.1 exchange with 127.0.0.1:port (the connection closed after it); the whole response.
std::string HttpExchange(int port, const std::string& method, const std::string& path) {
  const std::string request = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
                              (method == "POST" ? "Content-Length: 0\r\n" : "") + "\r\n";
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    (void)!write(fd, request.data(), request.size());
    char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

TEST(MetricsHttpServerTest, ServesMetricsAnd404) {
  MetricsRegistry r;
  r.GetCounter("served_total", "Served.").Increment(5);
  auto server = MetricsHttpServer::Start("127.0.0.1:0", &r);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  EXPECT_EQ((*server)->address(), "127.0.0.1:" + std::to_string((*server)->port()));

  const std::string ok = HttpExchange((*server)->port(), "GET", "/metrics");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << ok;
  EXPECT_NE(ok.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"), std::string::npos) << ok;
  const std::string body = r.Render();
  EXPECT_EQ(ok.substr(ok.find("\r\n\r\n") + 4), body);
  EXPECT_NE(ok.find("Content-Length: " + std::to_string(body.size()) + "\r\n"), std::string::npos) << ok;

  const std::string missing = HttpExchange((*server)->port(), "GET", "/other");
  EXPECT_EQ(missing.rfind("HTTP/1.1 404", 0), 0u) << missing;
  const std::string post = HttpExchange((*server)->port(), "POST", "/metrics");
  EXPECT_EQ(post.rfind("HTTP/1.1 405", 0), 0u) << post;
  const std::string head = HttpExchange((*server)->port(), "HEAD", "/metrics");
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  EXPECT_EQ(head.substr(head.find("\r\n\r\n") + 4), "");

  // Scrapes see current values.
  r.GetCounter("served_total", "Served.").Increment();
  EXPECT_NE(HttpExchange((*server)->port(), "GET", "/metrics").find("served_total 6\n"),
            std::string::npos);
}

TEST(MetricsHttpServerTest, RefusesBadOrBusyAddresses) {
  MetricsRegistry r;
  EXPECT_EQ(MetricsHttpServer::Start("no-port", &r).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsHttpServer::Start("127.0.0.1:http", &r).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsHttpServer::Start("127.0.0.1:70000", &r).status().code(), absl::StatusCode::kInvalidArgument);
  auto first = MetricsHttpServer::Start("localhost:0", &r);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = MetricsHttpServer::Start("127.0.0.1:" + std::to_string((*first)->port()), &r);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
}

}  // namespace
}  // namespace layerpipe
