#include "engine/tokenizer/chat_format.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace layerpipe {
namespace {

void AppendText(const Tokenizer& tokenizer, std::string_view text, std::vector<int32_t>* ids,
                SoftTokenExpander* soft = nullptr) {
  if (soft != nullptr) {
    soft->Append(tokenizer, text, ids);
    return;
  }
  const std::vector<int32_t> piece = tokenizer.Encode(text, /*add_bos=*/false);
  ids->insert(ids->end(), piece.begin(), piece.end());
}

void AppendTurn(const Tokenizer& tokenizer, std::string_view role, std::string_view text,
                std::vector<int32_t>* ids, SoftTokenExpander* soft = nullptr) {
  ids->push_back(kTurnBeginId);
  std::string body;
  body.reserve(role.size() + 1 + text.size());
  body.append(role).append("\n").append(text);
  AppendText(tokenizer, body, ids, soft);
  ids->push_back(kTurnEndId);
  AppendText(tokenizer, "\n", ids);
}

void AppendGenerationPrompt(const Tokenizer& tokenizer, std::vector<int32_t>* ids) {
  ids->push_back(kTurnBeginId);
  AppendText(tokenizer, "model\n", ids);
  ids->push_back(kChannelBeginId);
  AppendText(tokenizer, "thought\n", ids);
  ids->push_back(kChannelEndId);
}

// The earliest of `spellings` in `text` at or after `from`: its position and length (npos when none).
std::pair<size_t, size_t> FindFirst(std::string_view text, size_t from, const std::vector<std::string_view>& spellings) {
  std::pair<size_t, size_t> best{std::string_view::npos, 0};
  for (std::string_view s : spellings) {
    if (s.empty()) continue;
    const size_t at = text.find(s, from);
    if (at < best.first) best = {at, s.size()};
  }
  return best;
}

}  // namespace

std::string StripThinking(const Tokenizer& tokenizer, std::string_view text) {
  // The 12B's file and the test vocabulary spell the channel ids differently; a client may echo either.
  const std::vector<std::string_view> opens{"<|channel>", tokenizer.IdToToken(kChannelBeginId)};
  const std::vector<std::string_view> closes{"<channel|>", tokenizer.IdToToken(kChannelEndId)};
  std::string out;
  size_t at = 0;
  while (at < text.size()) {
    const auto [open, open_len] = FindFirst(text, at, opens);
    if (open == std::string_view::npos) {
      out.append(text.substr(at));
      break;
    }
    out.append(text.substr(at, open - at));
    const auto [close, close_len] = FindFirst(text, open + open_len, closes);
    if (close == std::string_view::npos) break;  // an unclosed thought runs to the end
    at = close + close_len;
  }
  return std::string(absl::StripAsciiWhitespace(out));
}

absl::StatusOr<std::vector<int32_t>> BuildChatConversation(const Tokenizer& tokenizer,
                                                           const std::vector<ChatMessage>& messages,
                                                           SoftTokenExpander* soft) {
  if (messages.empty()) return absl::InvalidArgumentError("the conversation has no messages");
  std::vector<int32_t> ids{kBosId};
  bool any_user = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system") {
      if (i != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("messages[", i, "]: a system message may only come first"));
      }
      AppendTurn(tokenizer, "system", m.content, &ids, soft);
    } else if (m.role == "user") {
      any_user = true;
      AppendTurn(tokenizer, "user", m.content, &ids, soft);
    } else if (m.role == "assistant" || m.role == "model") {
      AppendTurn(tokenizer, "model", StripThinking(tokenizer, m.content), &ids, soft);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("messages[", i, "]: unknown role \"", m.role,
                                                     "\" (system, user or assistant)"));
    }
  }
  if (!any_user) return absl::InvalidArgumentError("the conversation has no user message");
  if (messages.back().role != "user") {
    return absl::InvalidArgumentError(absl::StrCat("messages[", messages.size() - 1,
                                                   "]: the conversation must end with a user message, not \"",
                                                   messages.back().role, "\""));
  }
  AppendGenerationPrompt(tokenizer, &ids);
  return ids;
}

std::vector<int32_t> BuildChatPrompt(const Tokenizer& tokenizer, std::string_view user_text,
                                     std::string_view system_text, SoftTokenExpander* soft) {
  std::vector<int32_t> ids{kBosId};
  if (!system_text.empty()) AppendTurn(tokenizer, "system", system_text, &ids, soft);
  AppendTurn(tokenizer, "user", user_text, &ids, soft);
  AppendGenerationPrompt(tokenizer, &ids);
  return ids;
}

}  // namespace layerpipe
