#include "coordinator/http/openai_request.h"

#include <cstdint>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/chat_messages_json.h"

namespace layerpipe::http {
namespace {

using nlohmann::json;

absl::Status Bad(const std::string& param, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(param, ": ", what));
}

// A JSON number that can be a token id: an integer in [0, 2^31).
bool IsTokenId(const json& id) {
  return id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() <= std::numeric_limits<int32_t>::max();
}

// Typed reads of optional fields; JSON null counts as absent, as OpenAI's own server treats it.
class Body {
 public:
  explicit Body(const json& body) : body_(body) {}
  bool Has(const char* key) const { return body_.contains(key) && !body_[key].is_null(); }
  const json& operator[](const char* key) const { return body_[key]; }

  absl::Status Number(const char* key, std::optional<double>* out) const {
    if (!Has(key)) return absl::OkStatus();
    if (!body_[key].is_number()) return Bad(key, "must be a number");
    *out = body_[key].get<double>();
    return absl::OkStatus();
  }
  absl::Status Integer(const char* key, std::optional<int64_t>* out) const {
    if (!Has(key)) return absl::OkStatus();
    const json& v = body_[key];
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()}) {
      return Bad(key, "is too large");
    }
    if (!v.is_number_integer()) return Bad(key, "must be an integer");
    *out = v.get<int64_t>();
    return absl::OkStatus();
  }
  absl::Status Bool(const char* key, bool* out) const {
    if (!Has(key)) return absl::OkStatus();
    if (!body_[key].is_boolean()) return Bad(key, "must be true or false");
    *out = body_[key].get<bool>();
    return absl::OkStatus();
  }

 private:
  const json& body_;
};

#define LP_RETURN_IF_ERROR(expr)         \
  do {                                   \
    if (absl::Status _st = (expr); !_st.ok()) return _st; \
  } while (0)

// Fields OpenAI defines that this server does not implement: the first group refused whenever present
// (even empty: a client that sends tools expects them to work), the rest unless they ask for nothing.
absl::Status RefuseUnsupported(const Body& b) {
  for (const char* key : {"tools", "functions", "tool_choice", "function_call", "suffix", "audio", "prediction",
                          "modalities", "web_search_options", "parallel_tool_calls"}) {
    if (b.Has(key)) return Bad(key, "is not supported by this server");
  }
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    std::optional<double> v;
    LP_RETURN_IF_ERROR(b.Number(key, &v));
    if (v && *v != 0) return Bad(key, "is not supported (use repetition_penalty)");
  }
  if (b.Has("logit_bias") && !(b["logit_bias"].is_object() && b["logit_bias"].empty())) {
    return Bad("logit_bias", "is not supported");
  }
  for (const char* key : {"n", "best_of"}) {
    std::optional<int64_t> v;
    LP_RETURN_IF_ERROR(b.Integer(key, &v));
    if (v && *v != 1) return Bad(key, "only 1 is supported");
  }
  if (b.Has("response_format")) {
    const json& f = b["response_format"];
    if (!f.is_object() || !f.contains("type") || f["type"] != "text") {
      return Bad("response_format", "only {\"type\": \"text\"} is supported");
    }
  }
  return absl::OkStatus();
}

// What both endpoints share: model, sampling, length, stops, streaming.
absl::Status ParseCommon(const Body& b, const OpenAiDefaults& d, OpenAiCall* call) {
  LP_RETURN_IF_ERROR(RefuseUnsupported(b));
  if (b.Has("model")) {
    if (!b["model"].is_string()) return Bad("model", "must be a string");
    call->model = b["model"].get<std::string>();
    if (call->model != d.model) {
      return absl::NotFoundError(absl::StrCat("the model `", call->model, "` does not exist; this server serves `",
                                              d.model, "`"));
    }
  }
  call->model = d.model;
  v1::GenerateRequest& req = call->request;
  std::optional<int64_t> max_tokens, max_completion_tokens, top_k, seed;
  LP_RETURN_IF_ERROR(b.Integer("max_tokens", &max_tokens));
  LP_RETURN_IF_ERROR(b.Integer("max_completion_tokens", &max_completion_tokens));
  if (max_completion_tokens) max_tokens = max_completion_tokens;
  if (max_tokens) {
    if (*max_tokens <= 0) return Bad(max_completion_tokens ? "max_completion_tokens" : "max_tokens", "must be positive");
    req.set_max_new_tokens(static_cast<int32_t>(std::min<int64_t>(*max_tokens, std::numeric_limits<int32_t>::max())));
  }
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  LP_RETURN_IF_ERROR(b.Number("temperature", &temperature));
  LP_RETURN_IF_ERROR(b.Number("top_p", &top_p));
  LP_RETURN_IF_ERROR(b.Number("min_p", &min_p));
  LP_RETURN_IF_ERROR(b.Number("repetition_penalty", &repetition_penalty));
  LP_RETURN_IF_ERROR(b.Integer("top_k", &top_k));
  LP_RETURN_IF_ERROR(b.Integer("seed", &seed));
  v1::SamplingParams* s = req.mutable_sampling();
  if (temperature) s->set_temperature(static_cast<float>(*temperature));
  else if (d.temperature) s->set_temperature(*d.temperature);
  else s->set_temperature(1.0f);  // OpenAI's default
  if (top_p) s->set_top_p(static_cast<float>(*top_p));
  else if (d.top_p) s->set_top_p(*d.top_p);
  if (top_k) {
    // vLLM's convention: -1 means off.
    if (*top_k < -1 || *top_k > std::numeric_limits<int32_t>::max()) return Bad("top_k", "must be -1, 0 or positive");
    s->set_top_k(static_cast<int32_t>(std::max<int64_t>(*top_k, 0)));
  } else if (d.top_k) {
    s->set_top_k(*d.top_k);
  }
  if (min_p) s->set_min_p(static_cast<float>(*min_p));
  if (repetition_penalty) s->set_repetition_penalty(static_cast<float>(*repetition_penalty));
  if (seed) {
    if (*seed < 0) return Bad("seed", "must be >= 0");
    s->set_seed(static_cast<uint64_t>(*seed));
  }
  if (b.Has("stop")) {
    const json& stop = b["stop"];
    if (stop.is_string()) {
      req.add_stop(stop.get<std::string>());
    } else if (stop.is_array()) {
      for (const json& one : stop) {
        if (!one.is_string()) return Bad("stop", "must be a string or an array of strings");
        req.add_stop(one.get<std::string>());
      }
    } else {
      return Bad("stop", "must be a string or an array of strings");
    }
  }
  if (b.Has("stop_token_ids")) {  // vLLM's extension
    if (!b["stop_token_ids"].is_array()) return Bad("stop_token_ids", "must be an array of token ids");
    for (const json& id : b["stop_token_ids"]) {
      if (!IsTokenId(id)) return Bad("stop_token_ids", "must be an array of non-negative token ids");
      req.add_stop_ids(id.get<int32_t>());
    }
  }
  LP_RETURN_IF_ERROR(b.Bool("stream", &call->stream));
  if (b.Has("stream_options")) {
    const json& o = b["stream_options"];
    if (!o.is_object()) return Bad("stream_options", "must be an object");
    if (!call->stream) return Bad("stream_options", "is only allowed with stream: true");
    if (o.contains("include_usage") && !o["include_usage"].is_null()) {
      if (!o["include_usage"].is_boolean()) return Bad("stream_options.include_usage", "must be true or false");
      call->include_usage = o["include_usage"].get<bool>();
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OpenAiDefaults> ReadOpenAiDefaults(const std::string& path) {
  OpenAiDefaults d;
  std::ifstream in(path, std::ios::binary);
  if (!in) return d;  // no generation_config.json: OpenAI's own defaults
  const json config = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  // do_sample false means greedy, whatever the other fields say.
  if (config.contains("do_sample") && config["do_sample"] == false) {
    d.temperature = 0.0f;
    return d;
  }
  auto number = [&](const char* key) -> std::optional<double> {
    if (config.contains(key) && config[key].is_number()) return config[key].get<double>();
    return std::nullopt;
  };
  if (auto t = number("temperature")) d.temperature = static_cast<float>(*t);
  if (auto p = number("top_p")) d.top_p = static_cast<float>(*p);
  if (auto k = number("top_k"); k && *k >= 0 && *k <= std::numeric_limits<int32_t>::max()) d.top_k = static_cast<int>(*k);
  return d;
}

absl::StatusOr<OpenAiCall> ParseChatCompletion(const json& body, const OpenAiDefaults& defaults) {
  if (!body.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  const Body b(body);
  OpenAiCall call;
  LP_RETURN_IF_ERROR(ParseCommon(b, defaults, &call));
  if (!b.Has("messages")) return Bad("messages", "is required");
  std::vector<ChatAttachment> attachments;
  auto messages = ParseChatMessages(body["messages"], &attachments);
  if (!messages.ok()) return messages.status();
  // The parts became <|image|> / <|audio|> items in the texts, which take the attachments in order.
  for (ChatAttachment& a : attachments) {
    v1::Attachment* out = call.request.add_attachments();
    if (a.image) {
      out->set_image(std::move(a.bytes));
    } else {
      out->set_audio(std::move(a.bytes));
    }
  }
  // OpenAI's newer name for a system turn.
  for (ChatMessage& m : *messages) {
    if (m.role == "developer") m.role = "system";
    v1::ChatMessage* out = call.request.mutable_messages()->add_messages();
    out->set_role(m.role);
    out->set_content(m.content);
  }
  LP_RETURN_IF_ERROR(b.Bool("logprobs", &call.logprobs));
  std::optional<int64_t> top;
  LP_RETURN_IF_ERROR(b.Integer("top_logprobs", &top));
  if (top) {
    if (!call.logprobs) return Bad("top_logprobs", "needs logprobs: true");
    if (*top < 0 || *top > 20) return Bad("top_logprobs", "must be in [0, 20]");
    call.request.set_top_logprobs(static_cast<int32_t>(*top));
  }
  return call;
}

absl::StatusOr<OpenAiCall> ParseCompletion(const json& body, const OpenAiDefaults& defaults) {
  if (!body.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  const Body b(body);
  OpenAiCall call;
  LP_RETURN_IF_ERROR(ParseCommon(b, defaults, &call));
  if (!b.Has("prompt")) return Bad("prompt", "is required");
  // A string, token ids, or a batch of one of either.
  json prompt = body["prompt"];
  if (prompt.is_array() && prompt.size() == 1 && (prompt[0].is_string() || prompt[0].is_array())) prompt = prompt[0];
  if (prompt.is_string()) {
    call.request.set_prompt(prompt.get<std::string>());
  } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number_integer()) {
    for (const json& id : prompt) {
      if (!IsTokenId(id)) return Bad("prompt", "token ids must be non-negative integers");
      call.request.mutable_ids()->add_ids(id.get<int32_t>());
    }
  } else if (prompt.is_array() && prompt.size() > 1) {
    return Bad("prompt", "a batch of several prompts is not supported; send one per request");
  } else {
    return Bad("prompt", "must be a string or an array of token ids");
  }
  LP_RETURN_IF_ERROR(b.Bool("echo", &call.echo));
  std::optional<int64_t> logprobs;
  LP_RETURN_IF_ERROR(b.Integer("logprobs", &logprobs));
  if (logprobs) {
    if (*logprobs < 0 || *logprobs > 20) return Bad("logprobs", "must be in [0, 20]");
    call.logprobs = true;
    call.request.set_top_logprobs(static_cast<int32_t>(*logprobs));
    if (call.echo) return Bad("logprobs", "with echo (the prompt's logprobs) is not supported");
  }
  return call;
}

}  // namespace layerpipe::http
