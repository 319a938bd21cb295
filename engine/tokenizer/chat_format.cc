#include "engine/tokenizer/chat_format.h"

#include <string>

namespace layerpipe {
namespace {

void AppendText(const Tokenizer& tokenizer, std::string_view text, std::vector<int32_t>* ids) {
  const std::vector<int32_t> piece = tokenizer.Encode(text, /*add_bos=*/false);
  ids->insert(ids->end(), piece.begin(), piece.end());
}

void AppendTurn(const Tokenizer& tokenizer, std::string_view role, std::string_view text,
                std::vector<int32_t>* ids) {
  ids->push_back(kTurnBeginId);
  std::string body;
  body.reserve(role.size() + 1 + text.size());
  body.append(role).append("\n").append(text);
  AppendText(tokenizer, body, ids);
  ids->push_back(kTurnEndId);
  AppendText(tokenizer, "\n", ids);
}

}  // namespace

std::vector<int32_t> BuildChatPrompt(const Tokenizer& tokenizer, std::string_view user_text,
                                     std::string_view system_text) {
  std::vector<int32_t> ids{kBosId};
  if (!system_text.empty()) AppendTurn(tokenizer, "system", system_text, &ids);
  AppendTurn(tokenizer, "user", user_text, &ids);
  ids.push_back(kTurnBeginId);
  AppendText(tokenizer, "model\n", &ids);
  ids.push_back(kChannelBeginId);
  AppendText(tokenizer, "thought\n", &ids);
  ids.push_back(kChannelEndId);
  return ids;
}

}  // namespace layerpipe
