// The text-level stages of a tokenizer.json around the model: normalizer, pre-tokenizer and decoder.
// Only the stage types whose behavior is fully implemented are accepted; anything else is a load error
// rather than a silent mis-tokenization.
#ifndef LAYERPIPE_ENGINE_TOKENIZER_PIPELINE_H_
#define LAYERPIPE_ENGINE_TOKENIZER_PIPELINE_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace layerpipe {

// Replaces every non-overlapping occurrence of `from` (non-empty) with `to`, left to right.
std::string ReplaceAllLiteral(std::string_view text, std::string_view from, std::string_view to);

// Normalizer: a sequence of literal Replace and Prepend steps ("Sequence" configs are flattened).
class Normalizer {
 public:
  static absl::StatusOr<Normalizer> FromJson(const nlohmann::json& config, const std::string& source);
  bool empty() const { return steps_.empty(); }
  std::string Apply(std::string_view text) const;

 private:
  struct Step {
    bool prepend = false;
    std::string pattern;  // Replace only
    std::string content;  // replacement, or the prefix for Prepend
  };
  absl::Status Add(const nlohmann::json& config, const std::string& source);
  std::vector<Step> steps_;
};

// Pre-tokenizer: a sequence of Split steps on a literal pattern, with Hugging Face's delimiter behaviors.
class PreTokenizer {
 public:
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

  static absl::StatusOr<PreTokenizer> FromJson(const nlohmann::json& config, const std::string& source);
  // Appends the pieces of `text` (views into it) to `out`; with no steps, the whole text is one piece.
  void Split(std::string_view text, std::vector<std::string_view>* out) const;

 private:
  struct Step {
    std::string pattern;
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
  };
  absl::Status Add(const nlohmann::json& config, const std::string& source);
  static void SplitOne(const Step& step, std::string_view text, std::vector<std::string_view>* out);
  std::vector<Step> steps_;
};

// Decoder: per-token literal replacements, then optional byte-fallback grouping, then concatenation.
// This is the shape of Sequence[Replace*, ByteFallback?, Fuse?]; other layouts are rejected at load.
class TokenDecoder {
 public:
  static absl::StatusOr<TokenDecoder> FromJson(const nlohmann::json& config, const std::string& source);

  // The token's text after the replacement steps.
  std::string Transform(std::string_view token) const;
  // With byte fallback on, the byte a transformed token stands for ("<0xE2>" -> 0xE2), else -1.
  int ByteValue(std::string_view transformed) const;

 private:
  absl::Status Add(const nlohmann::json& config, const std::string& source, bool* fused);
  std::vector<std::pair<std::string, std::string>> replacements_;
  bool byte_fallback_ = false;
};

// The value JavaScript's parseInt(token.slice(3, 5), 16) gives a byte-fallback candidate of the reference
// decoder (a 6-UTF-16-unit "<0x..>" string), reduced to a byte; -1 where the reference sees no byte.
int JsByteTokenValue(std::string_view token);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_TOKENIZER_PIPELINE_H_
