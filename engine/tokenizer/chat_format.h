// Prompt layout of the instruction-tuned model (MODEL.md §4). Turn and channel markers are inserted as ids,
// never by tokenizing their spelling: the test vocabulary spells ids 105/106 <start_of_turn>/<end_of_turn>,
// the 12B's own file <|turn>/<turn|>, and only the ids agree.
#ifndef LAYERPIPE_ENGINE_TOKENIZER_CHAT_FORMAT_H_
#define LAYERPIPE_ENGINE_TOKENIZER_CHAT_FORMAT_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace layerpipe {

inline constexpr int32_t kBosId = 2;
inline constexpr int32_t kTurnBeginId = 105;    // <|turn>
inline constexpr int32_t kTurnEndId = 106;      // <turn|>
inline constexpr int32_t kChannelBeginId = 100; // <|channel>
inline constexpr int32_t kChannelEndId = 101;   // <channel|>

// <bos>[<|turn>system\n{system}<turn|>\n]<|turn>user\n{user}<turn|>\n<|turn>model\n<|channel>thought\n<channel|>
// The system turn is present only when system_text is non-empty. The text between markers ("user\n" + text,
// "\n", ...) is tokenized as one piece, as a rendered chat template would be; user text is not escaped, so
// special-token spellings inside it become those tokens.
std::vector<int32_t> BuildChatPrompt(const Tokenizer& tokenizer, std::string_view user_text,
                                     std::string_view system_text = {});

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_TOKENIZER_CHAT_FORMAT_H_
