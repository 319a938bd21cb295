#include "engine/tokenizer/chat_messages_json.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace layerpipe {
namespace {

absl::StatusOr<std::string> ContentText(const nlohmann::json& content, const std::string& where) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return absl::InvalidArgumentError(absl::StrCat(where, ": must be a string or an array of parts"));
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const nlohmann::json& part = content[j];
    const std::string at = absl::StrCat(where, "[", j, "]");
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(at, ": a part is an object with a string \"type\""));
    }
    const std::string type = part["type"].get<std::string>();
    if (type != "text") {
      return absl::InvalidArgumentError(absl::StrCat(at, ": parts of type \"", type, "\" are not supported (text only)"));
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(at, ": a text part needs a string \"text\""));
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace

absl::StatusOr<std::vector<ChatMessage>> ParseChatMessages(const nlohmann::json& messages) {
  if (!messages.is_array()) return absl::InvalidArgumentError("messages must be an array of {role, content} objects");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const nlohmann::json& m = messages[i];
    const std::string at = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return absl::InvalidArgumentError(absl::StrCat(at, ": must be an object"));
    if (!m.contains("role") || !m["role"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(at, ": needs a string \"role\""));
    }
    if (!m.contains("content")) return absl::InvalidArgumentError(absl::StrCat(at, ": needs \"content\""));
    auto text = ContentText(m["content"], at + ".content");
    if (!text.ok()) return text.status();
    out.push_back({m["role"].get<std::string>(), *std::move(text)});
  }
  return out;
}

absl::StatusOr<std::vector<ChatMessage>> ReadChatMessagesFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the messages file ", path));
  std::stringstream buf;
  buf << in.rdbuf();
  const nlohmann::json doc = nlohmann::json::parse(buf.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  auto messages = ParseChatMessages(doc);
  if (!messages.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", messages.status().message()));
  return messages;
}

}  // namespace layerpipe
