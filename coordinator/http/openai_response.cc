#include "coordinator/http/openai_response.h"

#include <chrono>
#include <random>

#include "absl/strings/str_format.h"

namespace layerpipe::http {
namespace {

using nlohmann::json;

std::string NewId(Endpoint e) {
  std::random_device rd;
  return absl::StrFormat("%s-%08x%08x%08x", e == Endpoint::kChat ? "chatcmpl" : "cmpl", rd(), rd(), rd());
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

json Bytes(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

}  // namespace

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string FinishReason(const std::string& ours) { return ours == "cancelled" ? "abort" : ours; }

OpenAiResponse::OpenAiResponse(Endpoint endpoint, const OpenAiCall& call, const Tokenizer* tokenizer)
    : endpoint_(endpoint),
      logprobs_(call.logprobs),
      model_(call.model),
      tokenizer_(tokenizer),
      id_(NewId(endpoint)),
      created_(UnixSeconds()) {}

void OpenAiResponse::Add(const v1::GenerateResponse& msg) {
  text_ += msg.text();
  for (const v1::TokenInfo& t : msg.tokens()) *tokens_.Add() = t;
  if (!msg.finish_reason().empty()) {
    finish_reason_ = msg.finish_reason();
    prompt_tokens_ = msg.usage().prompt_tokens();
    completion_tokens_ = msg.usage().completion_tokens();
    cached_tokens_ = msg.usage().cached_prompt_tokens();
  }
}

std::string OpenAiResponse::TokenText(int32_t id) const {
  return tokenizer_ ? tokenizer_->Decode({&id, 1}, /*skip_special_tokens=*/false) : std::to_string(id);
}

json OpenAiResponse::Envelope(bool chunk) const {
  const char* object = endpoint_ == Endpoint::kChat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                    : "text_completion";
  return {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
}

json OpenAiResponse::Usage() const {
  return {{"prompt_tokens", prompt_tokens_}, {"completion_tokens", completion_tokens_},
          {"total_tokens", prompt_tokens_ + completion_tokens_},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens_}}}};
}

json OpenAiResponse::Logprobs(const google::protobuf::RepeatedPtrField<v1::TokenInfo>& tokens,
                              int64_t text_offset) const {
  if (endpoint_ == Endpoint::kChat) {
    json content = json::array();
    for (const v1::TokenInfo& t : tokens) {
      const std::string text = TokenText(t.id());
      json top = json::array();
      for (const v1::TopLogprob& alt : t.top()) {
        const std::string alt_text = TokenText(alt.id());
        top.push_back({{"token", alt_text}, {"logprob", alt.logprob()}, {"bytes", Bytes(alt_text)}});
      }
      content.push_back({{"token", text}, {"logprob", t.logprob()}, {"bytes", Bytes(text)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  // The legacy completions shape: parallel arrays.
  json tokens_out = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       offsets = json::array();
  for (const v1::TokenInfo& t : tokens) {
    const std::string text = TokenText(t.id());
    tokens_out.push_back(text);
    token_logprobs.push_back(t.logprob());
    json top = json::object();
    for (const v1::TopLogprob& alt : t.top()) top[TokenText(alt.id())] = alt.logprob();
    top_logprobs.push_back(top);
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(text.size());
  }
  return {{"tokens", tokens_out}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs},
          {"text_offset", offsets}};
}

json OpenAiResponse::Choice(const std::string& text, const google::protobuf::RepeatedPtrField<v1::TokenInfo>& tokens,
                            const std::string& finish_reason, bool chunk, int64_t text_offset) const {
  json choice = {{"index", 0}, {"logprobs", nullptr},
                 {"finish_reason", finish_reason.empty() ? json(nullptr) : json(FinishReason(finish_reason))}};
  if (endpoint_ == Endpoint::kChat) {
    if (chunk) {
      choice["delta"] = text.empty() ? json::object() : json{{"content", text}};
    } else {
      choice["message"] = {{"role", "assistant"}, {"content", text}};
    }
  } else {
    choice["text"] = text;
  }
  if (logprobs_ && (!chunk || !tokens.empty())) choice["logprobs"] = Logprobs(tokens, text_offset);
  return choice;
}

json OpenAiResponse::Whole() const {
  json out = Envelope(false);
  out["choices"] = json::array({Choice(echo_ + text_, tokens_, finish_reason_, false, static_cast<int64_t>(echo_.size()))});
  out["usage"] = Usage();
  return out;
}

json OpenAiResponse::FirstChunk() const {
  json out = Envelope(true);
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  if (endpoint_ == Endpoint::kChat) {
    choice["delta"] = {{"role", "assistant"}, {"content", ""}};
  } else {
    choice["text"] = echo_;
  }
  out["choices"] = json::array({choice});
  return out;
}

json OpenAiResponse::Chunk(const v1::GenerateResponse& msg) const {
  json out = Envelope(true);
  // text_offset counts the bytes before this chunk: echo, then everything earlier.
  const int64_t before = static_cast<int64_t>(echo_.size() + text_.size() - msg.text().size());
  out["choices"] = json::array({Choice(msg.text(), msg.tokens(), msg.finish_reason(), true, before)});
  return out;
}

json OpenAiResponse::UsageChunk() const {
  json out = Envelope(true);
  out["choices"] = json::array();
  out["usage"] = Usage();
  return out;
}

}  // namespace layerpipe::http
