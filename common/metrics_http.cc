#include "common/metrics_http.h"

#include <civetweb.h>

#include <cstring>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace layerpipe {
namespace {

constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// civetweb's own diagnostics (a client that hung up, ...) are not the server's business on stderr;
// start-up errors come back through mg_start2's error data instead.
int QuietLog(const struct mg_connection*, const char*) { return 1; }

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(const std::string& listen,
                                                                            const MetricsRegistry* registry) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(absl::string_view(listen).substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics address \"", listen, "\" is not HOST:PORT"));
  }
  std::string host = listen.substr(0, colon);
  // civetweb takes IP addresses only.
  if (host == "localhost") host = "127.0.0.1";
  const std::string ports = host.empty() ? std::to_string(port) : absl::StrCat(host, ":", port);

  static std::once_flag init;
  std::call_once(init, [] { mg_init_library(0); });

  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer(registry));
  struct mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  callbacks.begin_request = &MetricsHttpServer::HandleRequest;
  callbacks.log_message = &QuietLog;
  // Scrapes are rare and quick: a couple of threads is plenty.
  const char* options[] = {"listening_ports", ports.c_str(), "num_threads", "2", "request_timeout_ms", "10000",
                           nullptr};
  struct mg_init_data init_data;
  std::memset(&init_data, 0, sizeof(init_data));
  init_data.callbacks = &callbacks;
  init_data.user_data = server.get();
  init_data.configuration_options = options;
  char error_text[256] = "";
  unsigned error_code = 0;
  struct mg_error_data error;
  error.code = &error_code;
  error.text = error_text;
  error.text_buffer_size = sizeof(error_text);
  server->ctx_ = mg_start2(&init_data, &error);
  if (server->ctx_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", listen, ": ",
                                               error_text[0] != '\0' ? error_text : "civetweb did not start"));
  }
  struct mg_server_port bound[4];
  std::memset(bound, 0, sizeof(bound));
  if (mg_get_server_ports(server->ctx_, 4, bound) < 1 || bound[0].port <= 0) {
    return absl::InternalError(absl::StrCat("metrics server on ", listen, " reports no bound port"));
  }
  server->port_ = bound[0].port;
  server->address_ = absl::StrCat(host.empty() ? "0.0.0.0" : host, ":", server->port_);
  return server;
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> ServeMetricsIfAsked(const std::string& listen,
                                                                       const MetricsRegistry* registry) {
  if (listen.empty()) return std::unique_ptr<MetricsHttpServer>();
  auto server = MetricsHttpServer::Start(listen, registry);
  if (server.ok()) LP_LOG(INFO) << "metrics on http://" << (*server)->address() << "/metrics";
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

int MetricsHttpServer::HandleRequest(struct mg_connection* conn) {
  const struct mg_request_info* info = mg_get_request_info(conn);
  const auto* self = static_cast<const MetricsHttpServer*>(info->user_data);
  const char* uri = info->local_uri != nullptr ? info->local_uri : "";
  if (std::strcmp(uri, "/metrics") != 0) {
    mg_send_http_error(conn, 404, "%s", "not found; metrics are at /metrics\n");
    return 404;
  }
  const bool head = std::strcmp(info->request_method, "HEAD") == 0;
  if (!head && std::strcmp(info->request_method, "GET") != 0) {
    mg_send_http_error(conn, 405, "%s", "only GET and HEAD are served\n");
    return 405;
  }
  const std::string body = self->registry_->Render();
  mg_send_http_ok(conn, kContentType, static_cast<long long>(body.size()));
  if (!head) mg_write(conn, body.data(), body.size());
  return 200;
}

}  // namespace layerpipe
