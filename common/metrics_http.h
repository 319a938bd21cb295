// Serves a MetricsRegistry over HTTP for Prometheus: GET (or HEAD) /metrics answers the text
// exposition format; every other path is 404, another method on /metrics 405. Built on civetweb.
#ifndef LAYERPIPE_COMMON_METRICS_HTTP_H_
#define LAYERPIPE_COMMON_METRICS_HTTP_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics.h"

struct mg_context;
struct mg_connection;

namespace layerpipe {

class MetricsHttpServer {
 public:
  // Listens on `listen` ("HOST:PORT", HOST an IP address, "[::1]:PORT" or "localhost"; port 0 picks a
  // free port). `registry` must outlive the server. Unavailable when the address cannot be bound,
  // InvalidArgument when it is not HOST:PORT.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& listen,
                                                                  const MetricsRegistry* registry);
  ~MetricsHttpServer();  // stops serving; waits for requests in progress
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }
  // HOST:PORT with the port actually bound.
  const std::string& address() const { return address_; }
  // Stopping takes up to 2 s: civetweb notices the stop between polls of its listening socket.

 private:
  explicit MetricsHttpServer(const MetricsRegistry* registry) : registry_(registry) {}
  static int HandleRequest(struct mg_connection* conn);

  const MetricsRegistry* registry_;
  struct mg_context* ctx_ = nullptr;
  int port_ = 0;
  std::string address_;
};

// For a server's main(): serves `registry` on `listen` unless that is empty (then null), and logs
// where ("metrics on http://HOST:PORT/metrics"; stdout stays for the "listening on" line tools parse).
absl::StatusOr<std::unique_ptr<MetricsHttpServer>> ServeMetricsIfAsked(const std::string& listen,
                                                                       const MetricsRegistry* registry);

}  // namespace layerpipe

#endif  // LAYERPIPE_COMMON_METRICS_HTTP_H_
