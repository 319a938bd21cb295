// OpenAI request bodies (/v1/chat/completions, /v1/completions) turned into the gRPC API's
// GenerateRequest, so both front ends run one set of checks (ClientApi). Every field either maps onto
// the request, is accepted at a value that changes nothing (n = 1, penalties 0), or is refused with a
// 400 naming it; docs/http.md lists them.
#ifndef LAYERPIPE_COORDINATOR_HTTP_OPENAI_REQUEST_H_
#define LAYERPIPE_COORDINATOR_HTTP_OPENAI_REQUEST_H_

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "proto/layerpipe.pb.h"

namespace layerpipe::http {

// What the server fills in for fields a request leaves out.
struct OpenAiDefaults {
  std::string model;  // the served model name
  // The model's generation_config.json sampling, used when a request does not say (as vLLM does).
  std::optional<float> temperature, top_p;
  std::optional<int> top_k;
};

// The sampling fields of generation_config.json (absent file or fields: none).
absl::StatusOr<OpenAiDefaults> ReadOpenAiDefaults(const std::string& generation_config_path);

struct OpenAiCall {
  v1::GenerateRequest request;  // max_new_tokens 0: not given (the server's default applies)
  bool stream = false;
  bool include_usage = false;   // stream_options.include_usage
  bool logprobs = false;
  bool echo = false;            // completions: the prompt's text comes first
  std::string model;
};

// InvalidArgument "<param>: ..." for a field of the wrong type or value, NotFound for another model.
absl::StatusOr<OpenAiCall> ParseChatCompletion(const nlohmann::json& body, const OpenAiDefaults& defaults);
absl::StatusOr<OpenAiCall> ParseCompletion(const nlohmann::json& body, const OpenAiDefaults& defaults);

}  // namespace layerpipe::http

#endif  // LAYERPIPE_COORDINATOR_HTTP_OPENAI_REQUEST_H_
