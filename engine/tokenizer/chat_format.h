// Prompt layout of the instruction-tuned model (MODEL.md §4). Turn and channel markers are inserted as ids,
// never by tokenizing their spelling: the test vocabulary spells ids 105/106 <start_of_turn>/<end_of_turn>,
// the 12B's own file <|turn>/<turn|>, and only the ids agree.
#ifndef LAYERPIPE_ENGINE_TOKENIZER_CHAT_FORMAT_H_
#define LAYERPIPE_ENGINE_TOKENIZER_CHAT_FORMAT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/soft_token_prompt.h"
#include "engine/tokenizer/tokenizer.h"

namespace layerpipe {

inline constexpr int32_t kBosId = 2;
inline constexpr int32_t kTurnBeginId = 105;    // <|turn>
inline constexpr int32_t kTurnEndId = 106;      // <turn|>
inline constexpr int32_t kChannelBeginId = 100; // <|channel>
inline constexpr int32_t kChannelEndId = 101;   // <channel|>

// One message of a conversation, in OpenAI's roles: "system", "user", "assistant" ("model" is taken
// for "assistant", the name the format itself uses).
struct ChatMessage {
  std::string role;
  std::string content;
};

// <bos>[<|turn>system\n{system}<turn|>\n]{turns}<|turn>model\n<|channel>thought\n<channel|>
// where each user turn is <|turn>user\n{text}<turn|>\n and each earlier assistant turn
// <|turn>model\n{text}<turn|>\n with its thinking removed: every <|channel>...<channel|> span (by either
// spelling of those ids, or an unclosed one to the end) is cut and the rest trimmed, as the model's
// own template does, so that a conversation replayed from an API's history costs no thought tokens.
// The text between markers ("user\n" + text, "\n", ...) is tokenized as one piece, as a rendered chat
// template would be; user text is not escaped, so special-token spellings inside it become those tokens.
//
// InvalidArgument, naming the message, for: no messages, an unknown role, a system message anywhere
// but first, a conversation that does not end with a user message, or no user message at all.
// With `soft`, the <|image|> and <|audio|> placeholders in message texts expand through it (the caller
// checks soft->Finish()).
absl::StatusOr<std::vector<int32_t>> BuildChatConversation(const Tokenizer& tokenizer,
                                                           const std::vector<ChatMessage>& messages,
                                                           SoftTokenExpander* soft = nullptr);

// The one-turn case: a user text and an optional system text (empty: no system turn).
std::vector<int32_t> BuildChatPrompt(const Tokenizer& tokenizer, std::string_view user_text,
                                     std::string_view system_text = {}, SoftTokenExpander* soft = nullptr);

// How the chat template writes an image content item, and an audio one, inside a message's text.
inline constexpr std::string_view kChatImageItem = "\n\n<|image|>\n\n";
inline constexpr std::string_view kChatAudioItem = "<|audio|>";

// An assistant text without its thinking spans (as above), trimmed.
std::string StripThinking(const Tokenizer& tokenizer, std::string_view text);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_TOKENIZER_CHAT_FORMAT_H_
