// A JSON value as an error message shows it: its type, and for a scalar its text, cut (at a UTF-8
// boundary) when long. Containers are not dumped: dump() recurses, and a hostile file may nest deeply.
// Header-only, so that every parser (config, safetensors, tokenizer) can use it without a dependency.
#ifndef LAYERPIPE_COMMON_JSON_SHOWN_H_
#define LAYERPIPE_COMMON_JSON_SHOWN_H_

#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace layerpipe {

inline std::string Shown(const nlohmann::json& v) {
  if (v.is_structured()) return absl::StrCat(v.type_name(), " of ", v.size(), v.size() == 1 ? " entry" : " entries");
  std::string text = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  constexpr size_t kMax = 48;
  if (text.size() > kMax) {
    size_t cut = kMax;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text.resize(cut);
    text += "...";
  }
  return absl::StrCat(v.type_name(), " ", text);
}

}  // namespace layerpipe

#endif  // LAYERPIPE_COMMON_JSON_SHOWN_H_
