#include "engine/tokenizer/chat_messages_json.h"

#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace layerpipe {
namespace {

// The file of an image_url part: only inline data (a server fetching URLs it is given would reach
// wherever a client points it).
absl::StatusOr<std::string> ImageUrlBytes(const nlohmann::json& part, const std::string& at) {
  const nlohmann::json* url = nullptr;
  if (part.contains("image_url")) {
    const nlohmann::json& iu = part["image_url"];
    if (iu.is_string()) url = &iu;
    if (iu.is_object() && iu.contains("url") && iu["url"].is_string()) url = &iu["url"];
  }
  if (url == nullptr) return absl::InvalidArgumentError(absl::StrCat(at, ": an image_url part needs image_url.url"));
  const std::string& u = url->get_ref<const std::string&>();
  const size_t comma = u.find(',');
  if (u.rfind("data:", 0) != 0 || comma == std::string::npos ||
      std::string_view(u).substr(0, comma).find(";base64") == std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(at, ": image_url.url must be a base64 data: URL (",
                                                   "data:image/png;base64,...); other URLs are not fetched"));
  }
  std::string bytes;
  if (!absl::Base64Unescape(absl::string_view(u).substr(comma + 1), &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(at, ": image_url.url is not valid base64"));
  }
  return bytes;
}

absl::StatusOr<std::string> InputAudioBytes(const nlohmann::json& part, const std::string& at) {
  if (!part.contains("input_audio") || !part["input_audio"].is_object() || !part["input_audio"].contains("data") ||
      !part["input_audio"]["data"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(at, ": an input_audio part needs input_audio.data (base64)"));
  }
  const nlohmann::json& a = part["input_audio"];
  if (a.contains("format") && !(a["format"].is_string() && a["format"].get<std::string>() == "wav")) {
    return absl::InvalidArgumentError(absl::StrCat(at, ": input_audio.format must be \"wav\""));
  }
  std::string bytes;
  if (!absl::Base64Unescape(a["data"].get<std::string>(), &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(at, ": input_audio.data is not valid base64"));
  }
  return bytes;
}

absl::StatusOr<std::string> ContentText(const nlohmann::json& content, const std::string& where,
                                        std::vector<ChatAttachment>* attachments) {
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
    if (attachments != nullptr && (type == "image_url" || type == "input_audio")) {
      const bool image = type == "image_url";
      auto bytes = image ? ImageUrlBytes(part, at) : InputAudioBytes(part, at);
      if (!bytes.ok()) return bytes.status();
      attachments->push_back({image, *std::move(bytes)});
      text += image ? kChatImageItem : kChatAudioItem;
      continue;
    }
    if (type != "text") {
      return absl::InvalidArgumentError(absl::StrCat(at, ": parts of type \"", type, "\" are not supported",
                                                     attachments != nullptr ? " (text, image_url, input_audio)" : " here (text only)"));
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(at, ": a text part needs a string \"text\""));
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace

absl::StatusOr<std::vector<ChatMessage>> ParseChatMessages(const nlohmann::json& messages,
                                                           std::vector<ChatAttachment>* attachments) {
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
    auto text = ContentText(m["content"], at + ".content", attachments);
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
