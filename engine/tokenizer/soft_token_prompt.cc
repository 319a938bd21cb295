#include "engine/tokenizer/soft_token_prompt.h"

#include "absl/strings/str_cat.h"

namespace layerpipe {

SoftTokenExpander::SoftTokenExpander(const MultimodalTokenIds& ids, std::vector<int64_t> image_tokens,
                                     std::vector<int64_t> audio_tokens)
    : ids_(ids), tokens_{std::move(image_tokens), std::move(audio_tokens)} {}

void SoftTokenExpander::Append(const Tokenizer& tokenizer, std::string_view text, std::vector<int32_t>* out) {
  auto plain = [&](std::string_view piece) {
    if (piece.empty()) return;
    const std::vector<int32_t> ids = tokenizer.Encode(piece, /*add_bos=*/false);
    out->insert(out->end(), ids.begin(), ids.end());
  };
  size_t at = 0;
  for (;;) {
    const size_t image = text.find(kImagePlaceholder, at), audio = text.find(kAudioPlaceholder, at);
    const size_t next = std::min(image, audio);
    if (next == std::string_view::npos) break;
    plain(text.substr(at, next - at));
    const int kind = next == image ? 0 : 1;
    ++wanted_[kind];
    // An unmatched placeholder is reported by Finish; it contributes no ids.
    if (used_[kind] < static_cast<int>(tokens_[kind].size())) {
      const int64_t n = tokens_[kind][used_[kind]++];
      out->push_back(kind == 0 ? ids_.boi : ids_.boa);
      out->insert(out->end(), static_cast<size_t>(n), kind == 0 ? ids_.image : ids_.audio);
      out->push_back(kind == 0 ? ids_.eoi : ids_.eoa);
    }
    at = next + (kind == 0 ? kImagePlaceholder.size() : kAudioPlaceholder.size());
  }
  plain(text.substr(at));
}

std::vector<int32_t> SoftTokenExpander::EncodePrompt(const Tokenizer& tokenizer, std::string_view text, bool add_bos) {
  if (text.find(kImagePlaceholder) == std::string_view::npos && text.find(kAudioPlaceholder) == std::string_view::npos) {
    return tokenizer.Encode(text, add_bos);
  }
  // Gemma's post-processor only prepends <bos>, so the empty text gives exactly that prefix.
  std::vector<int32_t> out = tokenizer.Encode("", add_bos);
  Append(tokenizer, text, &out);
  return out;
}

absl::Status SoftTokenExpander::Finish() const {
  for (int kind = 0; kind < 2; ++kind) {
    const int given = static_cast<int>(tokens_[kind].size());
    if (wanted_[kind] != given) {
      const std::string_view spelling = kind == 0 ? kImagePlaceholder : kAudioPlaceholder;
      return absl::InvalidArgumentError(absl::StrCat("the prompt has ", wanted_[kind], " ", std::string(spelling),
                                                     " placeholder", wanted_[kind] == 1 ? "" : "s", " for ", given, " ",
                                                     kind == 0 ? "image" : "audio clip", given == 1 ? "" : "s",
                                                     " given"));
    }
  }
  return absl::OkStatus();
}

}  // namespace layerpipe
