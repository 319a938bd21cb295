// Streaming reader for tokenizer.json. The model's vocabulary and merge list (hundreds of thousands of
// entries) are read straight into flat vectors instead of a JSON tree, which roughly halves load time; the
// rest of the file, all small, is kept as a JSON tree.
#ifndef LAYERPIPE_ENGINE_TOKENIZER_JSON_H_
#define LAYERPIPE_ENGINE_TOKENIZER_JSON_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace layerpipe {

struct TokenizerJson {
  // The whole document, except that model.vocab and model.merges are absent when read into the vectors.
  nlohmann::json root;
  bool has_vocab = false;
  bool has_merges = false;
  std::vector<std::pair<std::string, int64_t>> vocab;            // model.vocab, in file order
  std::vector<std::pair<std::string, std::string>> merges;       // model.merges, in rank order
};

// Merges may be [left, right] pairs or legacy "left right" strings; for the latter, like the reference's
// split(" ", 2), anything after a second space is dropped. `source` names the file in errors.
absl::StatusOr<TokenizerJson> ParseTokenizerJson(std::string_view text, const std::string& source);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_TOKENIZER_JSON_H_
