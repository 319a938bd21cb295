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

// `content` is a string, null (an empty turn) or an array of parts of which only {"type": "text",
// "text": ...} is taken (the texts are joined); other keys of a message (name, ...) are ignored.
// InvalidArgument naming the element (messages[2].content[0]: ...) for anything else. Roles are checked
// later, by BuildChatConversation.
absl::StatusOr<std::vector<ChatMessage>> ParseChatMessages(const nlohmann::json& messages);

// The same from a file; NotFound / InvalidArgument name the path.
absl::StatusOr<std::vector<ChatMessage>> ReadChatMessagesFile(const std::string& path);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_TOKENIZER_CHAT_MESSAGES_JSON_H_
