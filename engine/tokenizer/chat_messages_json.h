// Conversations in OpenAI's JSON shape — an array of {"role": ..., "content": ...} — as the CLI's
// --messages file and the HTTP API's chat requests carry them.
#ifndef LAYERPIPE_ENGINE_TOKENIZER_CHAT_MESSAGES_JSON_H_
#define LAYERPIPE_ENGINE_TOKENIZER_CHAT_MESSAGES_JSON_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "engine/tokenizer/chat_format.h"

namespace layerpipe {

// An image or audio part of a message, decoded from base64: the file's bytes.
struct ChatAttachment {
  bool image = true;
  std::string bytes;
};

// `content` is a string, null (an empty turn) or an array of parts: {"type": "text", "text": ...}; with
// `attachments`, also {"type": "image_url", "image_url": {"url": "data:image/...;base64,..."}} and
// {"type": "input_audio", "input_audio": {"data": base64, "format": "wav"}}, which become the chat
// template's <|image|> / <|audio|> items in the text and their files in *attachments, in order. Other
// keys of a message (name, ...) are ignored. InvalidArgument naming the element (messages[2].content[0]:
// ...) for anything else. Roles are checked later, by BuildChatConversation.
absl::StatusOr<std::vector<ChatMessage>> ParseChatMessages(const nlohmann::json& messages,
                                                           std::vector<ChatAttachment>* attachments = nullptr);

// The same from a file; NotFound / InvalidArgument name the path.
absl::StatusOr<std::vector<ChatMessage>> ReadChatMessagesFile(const std::string& path);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_TOKENIZER_CHAT_MESSAGES_JSON_H_
