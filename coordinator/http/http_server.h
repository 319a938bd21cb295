// The coordinator's HTTP port (--http-listen): OpenAI's chat and completions endpoints, models, health,
// and the jobs of the gRPC API (docs/http.md). Every call passes the same gate (bearer tokens, per-client
// limits) and TLS as the gRPC client port, and runs through the same ClientApi.
#ifndef LAYERPIPE_COORDINATOR_HTTP_HTTP_SERVER_H_
#define LAYERPIPE_COORDINATOR_HTTP_HTTP_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "common/tls.h"
#include "coordinator/client_api.h"
#include "coordinator/http/openai_request.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace layerpipe::http {

struct HttpOptions {
  std::string listen;  // HOST:PORT (port 0: any free one)
  TlsFiles tls;        // cert + key: HTTPS; with ca, client certificates are required
  OpenAiDefaults defaults;
  int threads = 64;    // connections served at once (each open stream holds one)
};

class HttpServer {
 public:
  HttpServer(ClientApi* api, HttpOptions options);
  ~HttpServer();

  // Binds and starts serving on a thread of its own.
  absl::Status Start();
  int port() const { return port_; }
  void Stop();

 private:
  void Route();
  void ChatOrCompletion(const httplib::Request& req, httplib::Response& res, bool chat);
  void SubmitJob(const httplib::Request& req, httplib::Response& res);
  void Jobs(const httplib::Request& req, httplib::Response& res);
  void StreamJob(const httplib::Request& req, httplib::Response& res);
  void Health(httplib::Response& res);
  void Models(httplib::Response& res);
  // Admission by the gate; false (and the error written) when refused.
  bool Admit(const httplib::Request& req, httplib::Response& res, ClientGate::Pass* pass);

  ClientApi* api_;
  const HttpOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace layerpipe::http

#endif  // LAYERPIPE_COORDINATOR_HTTP_HTTP_SERVER_H_
