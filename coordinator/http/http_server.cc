#include "coordinator/http/http_server.h"

#include <httplib.h>

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/host_name.h"
#include "coordinator/jobs/job_listing.h"
#include "common/log.h"
#include "coordinator/http/openai_error.h"
#include "coordinator/http/openai_response.h"

namespace layerpipe::http {
namespace {

using nlohmann::json;

// An idle stream sends an SSE comment this often: a client that went away is noticed (the write
// fails) even while a long prompt is still being prefilled, and proxies keep the connection.
constexpr int kKeepaliveEvery = 10;  // ClientApi's ~100 ms waits

void WriteJson(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(Dump(body), "application/json");
}

void WriteError(httplib::Response& res, const HttpError& e) { WriteJson(res, e.status, e.body); }

// A body that does not parse; NotFound there is always the model (OpenAI's code for it).
HttpError BodyError(const absl::Status& st) {
  return absl::IsNotFound(st) ? MakeHttpError(404, std::string(st.message()), "model_not_found", "model")
                              : ToHttpError(st);
}

// gRPC's spelling of a peer, which the gate keys its per-client counts on.
std::string PeerOf(const httplib::Request& req) {
  const bool v6 = req.remote_addr.find(':') != std::string::npos;
  return v6 ? absl::StrCat("ipv6:[", req.remote_addr, "]:", req.remote_port)
            : absl::StrCat("ipv4:", req.remote_addr, ":", req.remote_port);
}

bool SendEvent(httplib::DataSink& sink, const std::string& data) {
  const std::string event = absl::StrCat("data: ", data, "\n\n");
  return sink.write(event.data(), event.size());
}

json JobJson(const v1::JobInfo& info, bool with_output) {
  json out = {{"id", info.job_id()},
              {"object", "job"},
              {"state", JobStateName(info.state())},
              {"prompt_tokens", info.prompt_tokens()},
              {"prefilled_tokens", info.prefilled_tokens()},
              {"generated_tokens", info.generated_tokens()},
              {"finish_reason", info.finish_reason().empty() ? json(nullptr) : json(info.finish_reason())},
              {"error", info.error().empty() ? json(nullptr) : json(info.error())}};
  if (with_output) {
    out["text"] = info.text();
    out["token_ids"] = std::vector<int32_t>(info.ids().begin(), info.ids().end());
  }
  return out;
}

json JobJson(const Request& r, bool with_output) {
  v1::JobInfo info;
  ClientApi::FillJobInfo(r, with_output, &info);
  return JobJson(info, with_output);
}

// GET /v1/jobs's query: page_size, page_token and state (by name), as ListJobs takes them.
absl::StatusOr<JobPage> JobPageOf(const httplib::Request& req, std::string* param) {
  int64_t size = 0;
  if (req.has_param("page_size") && !absl::SimpleAtoi(req.get_param_value("page_size"), &size)) {
    *param = "page_size";
    return absl::InvalidArgumentError("page_size must be an integer");
  }
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  if (req.has_param("state")) {
    auto named = JobStateFromName(req.get_param_value("state"));
    if (!named) {
      *param = "state";
      return absl::InvalidArgumentError(
          absl::StrCat("state must be one of ", JobStateNames(), ", not \"", req.get_param_value("state"), "\""));
    }
    state = *named;
  }
  // The state is valid by now: ParseJobPage can only refuse the size (negative) or the token.
  auto page = ParseJobPage(size, req.get_param_value("page_token"), state);
  if (!page.ok()) *param = size < 0 ? "page_size" : "page_token";
  return page;
}

// Streams `r` from `offset` as server-sent events, each event made by `event` from one Follow message;
// `done` writes what closes the stream. A follower that goes away cancels `r` only when `owner`.
void StreamEvents(ClientApi* api, httplib::Response& res, std::shared_ptr<ClientGate::Pass> pass,
                  std::shared_ptr<Request> r, int64_t offset, bool owner,
                  std::function<std::vector<std::string>(const v1::GenerateResponse&)> event,
                  std::function<std::vector<std::string>()> done) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [api, pass, r, offset, owner, event, done](size_t, httplib::DataSink& sink) {
        int idle_polls = 0;
        bool gone = false;  // a write failed: the client went away
        const absl::Status st = api->Follow(
            r, offset, owner,
            [&] {
              if (++idle_polls < kKeepaliveEvery) return true;
              idle_polls = 0;
              static constexpr char kComment[] = ": keepalive\n\n";
              gone = !sink.write(kComment, sizeof(kComment) - 1);
              return !gone;
            },
            [&](const v1::GenerateResponse& msg) {
              idle_polls = 0;
              for (const std::string& e : event(msg)) {
                if (!SendEvent(sink, e)) {
                  gone = true;
                  return false;
                }
              }
              return true;
            });
        if (gone) return false;
        if (!st.ok()) {
          SendEvent(sink, Dump(ToHttpError(st).body));
        } else {
          for (const std::string& e : done()) SendEvent(sink, e);
        }
        SendEvent(sink, "[DONE]");
        sink.done();
        return true;
      });
}

}  // namespace

HttpServer::HttpServer(ClientApi* api, HttpOptions options) : api_(api), options_(std::move(options)) {}

HttpServer::~HttpServer() { Stop(); }

absl::Status HttpServer::Start() {
  if (!options_.tls.cert.empty()) {
    server_ = std::make_unique<httplib::SSLServer>(options_.tls.cert.c_str(), options_.tls.key.c_str(),
                                                   options_.tls.ca.empty() ? nullptr : options_.tls.ca.c_str());
    if (!static_cast<httplib::SSLServer*>(server_.get())->is_valid()) {
      return absl::InvalidArgumentError("cannot set up TLS for the HTTP port from --tls-cert/--tls-key");
    }
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  const int threads = options_.threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // JSON spells a text or ids at most ~6 times longer than the raw request the gRPC port takes.
  server_->set_payload_max_length(static_cast<size_t>(api_->MaxRequestBytes()) * 6);
  server_->set_keep_alive_timeout(30);
  Route();
  const std::string host = HostOf(options_.listen);
  int port = 0;
  const std::string port_text = options_.listen.substr(options_.listen.rfind(':') + 1);
  if (!absl::SimpleAtoi(port_text, &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--http-listen: \"", options_.listen, "\" is not HOST:PORT"));
  }
  const std::string bind_host = host.size() > 2 && host.front() == '[' ? host.substr(1, host.size() - 2) : host;
  port_ = port == 0 ? server_->bind_to_any_port(bind_host.c_str()) : (server_->bind_to_port(bind_host.c_str(), port) ? port : -1);
  if (port_ <= 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.listen, " (--http-listen)"));
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

bool HttpServer::Admit(const httplib::Request& req, httplib::Response& res, ClientGate::Pass* pass) {
  auto p = api_->Admit(req.get_header_value("Authorization"), PeerOf(req));
  if (!p.ok()) {
    WriteError(res, ToHttpError(p.status()));
    return false;
  }
  *pass = *std::move(p);
  return true;
}

void HttpServer::Route() {
  httplib::Server& s = *server_;
  s.Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& r) { ChatOrCompletion(q, r, true); });
  s.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) { ChatOrCompletion(q, r, false); });
  s.Get("/v1/models", [this](const httplib::Request& q, httplib::Response& r) {
    ClientGate::Pass pass;
    if (Admit(q, r, &pass)) Models(r);
  });
  // Health is for probes (Kubernetes, load balancers): it needs no token.
  s.Get("/health", [this](const httplib::Request&, httplib::Response& r) { Health(r); });
  s.Post("/v1/jobs", [this](const httplib::Request& q, httplib::Response& r) { SubmitJob(q, r); });
  s.Get("/v1/jobs", [this](const httplib::Request& q, httplib::Response& r) { Jobs(q, r); });
  s.Get(R"(/v1/jobs/([^/]+))", [this](const httplib::Request& q, httplib::Response& r) { Jobs(q, r); });
  s.Post(R"(/v1/jobs/([^/]+)/cancel)", [this](const httplib::Request& q, httplib::Response& r) { Jobs(q, r); });
  s.Get(R"(/v1/jobs/([^/]+)/stream)", [this](const httplib::Request& q, httplib::Response& r) { StreamJob(q, r); });
  // Whatever httplib answers by itself (no such route, a body over the limit) still gets OpenAI's shape.
  s.set_error_handler([](const httplib::Request& q, httplib::Response& r) {
    if (!r.body.empty()) return;
    // cpp-httplib caps form-encoded bodies (curl -d without a Content-Type) at 8 KiB.
    const bool form = absl::StartsWith(q.get_header_value("Content-Type"), "application/x-www-form-urlencoded");
    const std::string msg = r.status == 413 && form ? "a body sent as application/x-www-form-urlencoded is limited to 8 KiB; "
                                                      "send it as Content-Type: application/json"
                            : r.status == 413 ? "the request body is larger than this server accepts"
                            : r.status == 404 ? absl::StrCat("no route ", q.method, " ", q.path)
                                              : absl::StrCat("HTTP ", r.status);
    WriteError(r, MakeHttpError(r.status, msg));
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& r, std::exception_ptr e) {
    std::string what = "internal error";
    try {
      if (e) std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = ex.what();
    }
    LP_LOG(ERROR) << "HTTP handler: " << what;
    WriteError(r, MakeHttpError(500, what));
  });
}

void HttpServer::Health(httplib::Response& res) {
  // What the pipeline's own health probes last found (a stage lost means not ready until it is
  // replaced): a probe of this endpoint, which needs no token, never reaches the workers.
  const bool serving = api_->pipeline()->ready();
  WriteJson(res, serving ? 200 : 503, {{"status", serving ? "ok" : "unavailable"}});
}

void HttpServer::Models(httplib::Response& res) {
  const json model = {{"id", options_.defaults.model},
                      {"object", "model"},
                      {"created", 0},
                      {"owned_by", "layerpipe"},
                      {"max_model_len", api_->max_model_len()}};
  WriteJson(res, 200, {{"object", "list"}, {"data", json::array({model})}});
}

void HttpServer::ChatOrCompletion(const httplib::Request& req, httplib::Response& res, bool chat) {
  auto pass = std::make_shared<ClientGate::Pass>();
  if (!Admit(req, res, pass.get())) return;
  const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return WriteError(res, ToHttpError(api_->Refused(absl::InvalidArgumentError("the body is not valid JSON"))));
  auto call = chat ? ParseChatCompletion(body, options_.defaults) : ParseCompletion(body, options_.defaults);
  if (!call.ok()) return WriteError(res, BodyError(api_->Refused(call.status())));
  auto r = api_->BuildGenerate(call->request, /*fill_max_new_tokens=*/true);
  if (!r.ok()) return WriteError(res, ToHttpError(r.status()));
  if (auto st = api_->pipeline()->Submit(*r); !st.ok()) return WriteError(res, ToHttpError(st, /*permanent=*/true));
  auto response = std::make_shared<OpenAiResponse>(chat ? Endpoint::kChat : Endpoint::kCompletion, *call,
                                                   api_->tokenizer());
  if (call->echo && api_->tokenizer() != nullptr) {
    response->SetEcho(api_->tokenizer()->Decode((*r)->prompt, /*skip_special_tokens=*/true));
  }
  if (!call->stream) {
    // No stream to notice a departure on: the request runs to its end.
    const absl::Status st = api_->Follow(
        *r, 0, /*owner=*/true, [] { return true; },
        [&](const v1::GenerateResponse& msg) {
          response->Add(msg);
          return true;
        });
    if (!st.ok()) return WriteError(res, ToHttpError(st));
    return WriteJson(res, 200, response->Whole());
  }
  const bool include_usage = call->include_usage;
  auto first = std::make_shared<bool>(true);
  StreamEvents(
      api_, res, pass, *r, 0, /*owner=*/true,
      [response, first](const v1::GenerateResponse& msg) {
        std::vector<std::string> events;
        if (*first) {
          events.push_back(Dump(response->FirstChunk()));
          *first = false;
        }
        response->Add(msg);
        events.push_back(Dump(response->Chunk(msg)));
        return events;
      },
      [response, include_usage] {
        std::vector<std::string> events;
        if (include_usage) events.push_back(Dump(response->UsageChunk()));
        return events;
      });
}

void HttpServer::SubmitJob(const httplib::Request& req, httplib::Response& res) {
  ClientGate::Pass pass;
  if (!Admit(req, res, &pass)) return;
  const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return WriteError(res, ToHttpError(api_->Refused(absl::InvalidArgumentError("the body is not a JSON object"))));
  }
  // A job is a chat or completions request that outlives its connection.
  const bool chat = body.contains("messages");
  auto call = chat ? ParseChatCompletion(body, options_.defaults) : ParseCompletion(body, options_.defaults);
  if (!call.ok()) return WriteError(res, BodyError(api_->Refused(call.status())));
  if (call->stream) return WriteError(res, MakeHttpError(400, "a job is followed at /v1/jobs/{id}/stream, not streamed", "", "stream"));
  auto r = api_->SubmitJob(call->request, pass, /*fill_max_new_tokens=*/true);
  if (!r.ok()) return WriteError(res, ToHttpError(r.status(), absl::IsResourceExhausted(r.status())));
  WriteJson(res, 200, JobJson(**r, false));
}

void HttpServer::Jobs(const httplib::Request& req, httplib::Response& res) {
  ClientGate::Pass pass;
  if (!Admit(req, res, &pass)) return;
  if (req.matches.size() < 2) {
    std::string param;
    auto page = JobPageOf(req, &param);
    if (!page.ok()) return WriteError(res, MakeHttpError(400, std::string(api_->Refused(page.status()).message()), "", param));
    auto listing = api_->ListJobs(pass, *page);
    if (!listing.ok()) return WriteError(res, ToHttpError(listing.status()));
    json data = json::array();
    for (const v1::JobInfo& info : listing->jobs()) data.push_back(JobJson(info, false));
    const std::string& next = listing->next_page_token();
    return WriteJson(res, 200, {{"object", "list"}, {"data", data}, {"has_more", !next.empty()},
                                {"next_page_token", next.empty() ? json(nullptr) : json(next)}});
  }
  auto r = api_->FindJob(req.matches[1], pass);
  if (!r.ok()) return WriteError(res, ToHttpError(r.status()));
  if (absl::EndsWith(req.path, "/cancel")) api_->pipeline()->Cancel(*r);
  WriteJson(res, 200, JobJson(**r, true));
}

void HttpServer::StreamJob(const httplib::Request& req, httplib::Response& res) {
  auto pass = std::make_shared<ClientGate::Pass>();
  if (!Admit(req, res, pass.get())) return;
  auto r = api_->FindJob(req.matches[1], *pass);
  if (!r.ok()) return WriteError(res, ToHttpError(r.status()));
  int64_t offset = 0;
  if (req.has_param("offset") && !absl::SimpleAtoi(req.get_param_value("offset"), &offset)) {
    return WriteError(res, MakeHttpError(400, "offset must be an integer", "", "offset"));
  }
  if (auto st = api_->CheckStreamOffset(**r, offset); !st.ok()) {
    return WriteError(res, MakeHttpError(400, std::string(st.message()), "", "offset"));
  }
  // A job outlives its followers: a disconnect does not cancel it.
  StreamEvents(
      api_, res, pass, *r, offset, /*owner=*/false,
      [](const v1::GenerateResponse& msg) {
        json e = {{"offset", msg.offset()}, {"text", msg.text()}, {"token_ids", json::array()}};
        for (const v1::TokenInfo& t : msg.tokens()) e["token_ids"].push_back(t.id());
        if (!msg.finish_reason().empty()) {
          e["finish_reason"] = msg.finish_reason();
          e["usage"] = {{"prompt_tokens", msg.usage().prompt_tokens()},
                        {"completion_tokens", msg.usage().completion_tokens()},
                        {"prompt_tokens_details", {{"cached_tokens", msg.usage().cached_prompt_tokens()}}}};
        }
        return std::vector<std::string>{Dump(e)};
      },
      [] { return std::vector<std::string>{}; });
}

}  // namespace layerpipe::http
