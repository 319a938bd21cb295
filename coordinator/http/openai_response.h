// The JSON bodies the OpenAI endpoints answer with — whole responses and stream chunks — built from the
// GenerateResponse messages ClientApi::Follow produces.
#ifndef LAYERPIPE_COORDINATOR_HTTP_OPENAI_RESPONSE_H_
#define LAYERPIPE_COORDINATOR_HTTP_OPENAI_RESPONSE_H_

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "coordinator/http/openai_request.h"
#include "engine/tokenizer/tokenizer.h"
#include "proto/layerpipe.pb.h"

namespace layerpipe::http {

enum class Endpoint { kChat, kCompletion };

// One response being written: its id, creation time and what has been said so far.
class OpenAiResponse {
 public:
  OpenAiResponse(Endpoint endpoint, const OpenAiCall& call, const Tokenizer* tokenizer);

  // Adds what a Follow message brings (text, tokens, and on the last one finish reason and usage).
  void Add(const v1::GenerateResponse& msg);
  // Text that comes before the generated text (completions with echo).
  void SetEcho(std::string text) { echo_ = std::move(text); }

  // The whole answer (stream: false).
  nlohmann::json Whole() const;
  // Stream chunks: the first (chat: the assistant role), one per Follow message, the usage chunk.
  nlohmann::json FirstChunk() const;
  nlohmann::json Chunk(const v1::GenerateResponse& msg) const;
  nlohmann::json UsageChunk() const;
  bool finished() const { return !finish_reason_.empty(); }

 private:
  nlohmann::json Envelope(bool chunk) const;
  nlohmann::json Choice(const std::string& text, const google::protobuf::RepeatedPtrField<v1::TokenInfo>& tokens,
                        const std::string& finish_reason, bool chunk, int64_t text_offset) const;
  nlohmann::json Logprobs(const google::protobuf::RepeatedPtrField<v1::TokenInfo>& tokens, int64_t text_offset) const;
  nlohmann::json Usage() const;
  std::string TokenText(int32_t id) const;

  const Endpoint endpoint_;
  const bool logprobs_;
  const std::string model_;
  const Tokenizer* tokenizer_;
  const std::string id_;
  const int64_t created_;
  std::string echo_, text_, finish_reason_;
  google::protobuf::RepeatedPtrField<v1::TokenInfo> tokens_;
  int64_t prompt_tokens_ = 0, completion_tokens_ = 0, cached_tokens_ = 0;
};

// JSON text for the wire: bytes that are not UTF-8 (a lone byte-fallback token) become U+FFFD instead of
// an exception.
std::string Dump(const nlohmann::json& j);

// OpenAI's finish reasons: "stop", "length"; a request cancelled by the server is vLLM's "abort".
std::string FinishReason(const std::string& ours);

}  // namespace layerpipe::http

#endif  // LAYERPIPE_COORDINATOR_HTTP_OPENAI_RESPONSE_H_
