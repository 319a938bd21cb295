#include "engine/tokenizer/pipeline.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/utf8.h"
#include "nlohmann/json.hpp"
#include "common/json_shown.h"

namespace layerpipe {
namespace {

absl::Status Unsupported(const std::string& source, const std::string& what) {
  return absl::UnimplementedError(absl::StrCat("tokenizer file '", source, "': unsupported ", what));
}

absl::Status Corrupt(const std::string& source, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer file '", source, "': ", what));
}

// A nlohmann::json value as shown in an error message: its type, and for a scalar its text, cut (at a UTF-8

std::string TypeOf(const nlohmann::json& config) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) return "";
  return config["type"].get<std::string>();
}

// The literal of a {"String": ...} pattern; regex patterns would need the reference's JavaScript regex
// semantics, which this tokenizer does not reproduce.
absl::StatusOr<std::string> LiteralPattern(const nlohmann::json& config, const std::string& source,
                                           const std::string& stage) {
  if (!config.contains("pattern") || !config["pattern"].is_object()) {
    return Corrupt(source, absl::StrCat(stage, " has no pattern object"));
  }
  const nlohmann::json& pattern = config["pattern"];
  if (pattern.contains("Regex")) return Unsupported(source, absl::StrCat(stage, " with a Regex pattern"));
  if (!pattern.contains("String") || !pattern["String"].is_string()) {
    return Corrupt(source, absl::StrCat(stage, " pattern must be {\"String\": ...}"));
  }
  std::string literal = pattern["String"].get<std::string>();
  if (literal.empty()) return Unsupported(source, absl::StrCat(stage, " with an empty pattern"));
  return literal;
}

// The reference applies replacements with String.prototype.replaceAll, where "$$", "$&", "$`" and "$'" in
// the replacement are substitutions, not text.
absl::StatusOr<std::string> ReplacementContent(const nlohmann::json& config, const std::string& source,
                                               const std::string& stage) {
  if (!config.contains("content") || !config["content"].is_string()) {
    return Corrupt(source, absl::StrCat(stage, " has no string content"));
  }
  std::string content = config["content"].get<std::string>();
  for (size_t i = 0; i + 1 < content.size(); ++i) {
    const char c = content[i + 1];
    if (content[i] == '$' && (c == '$' || c == '&' || c == '`' || c == '\'')) {
      return Unsupported(source, absl::StrCat(stage, " content with a '$' substitution"));
    }
  }
  return content;
}

}  // namespace

std::string ReplaceAllLiteral(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  size_t pos = 0;
  size_t hit = text.find(from);
  if (hit == std::string_view::npos) return std::string(text);
  out.reserve(text.size() + text.size() / 4);
  while (hit != std::string_view::npos) {
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
    hit = text.find(from, pos);
  }
  out.append(text.substr(pos));
  return out;
}

absl::StatusOr<Normalizer> Normalizer::FromJson(const nlohmann::json& config, const std::string& source) {
  Normalizer n;
  if (config.is_null()) return n;
  if (absl::Status s = n.Add(config, source); !s.ok()) return s;
  return n;
}

absl::Status Normalizer::Add(const nlohmann::json& config, const std::string& source) {
  const std::string type = TypeOf(config);
  if (type == "Sequence") {
    if (!config.contains("normalizers") || !config["normalizers"].is_array()) {
      return Corrupt(source, "normalizer Sequence has no normalizers list");
    }
    for (const auto& child : config["normalizers"]) {
      if (absl::Status s = Add(child, source); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (type == "Replace") {
    absl::StatusOr<std::string> pattern = LiteralPattern(config, source, "normalizer Replace");
    if (!pattern.ok()) return pattern.status();
    absl::StatusOr<std::string> content = ReplacementContent(config, source, "normalizer Replace");
    if (!content.ok()) return content.status();
    steps_.push_back({false, *std::move(pattern), *std::move(content)});
    return absl::OkStatus();
  }
  if (type == "Prepend") {
    if (!config.contains("prepend") || !config["prepend"].is_string()) {
      return Corrupt(source, "normalizer Prepend has no string 'prepend'");
    }
    steps_.push_back({true, "", config["prepend"].get<std::string>()});
    return absl::OkStatus();
  }
  return Unsupported(source, absl::StrCat("normalizer type '", type, "'"));
}

std::string Normalizer::Apply(std::string_view text) const {
  std::string current(text);
  for (const Step& step : steps_) {
    current = step.prepend ? step.content + current : ReplaceAllLiteral(current, step.pattern, step.content);
  }
  return current;
}

absl::StatusOr<PreTokenizer> PreTokenizer::FromJson(const nlohmann::json& config, const std::string& source) {
  PreTokenizer p;
  if (config.is_null()) return p;
  if (absl::Status s = p.Add(config, source); !s.ok()) return s;
  return p;
}

absl::Status PreTokenizer::Add(const nlohmann::json& config, const std::string& source) {
  const std::string type = TypeOf(config);
  if (type == "Sequence") {
    if (!config.contains("pretokenizers") || !config["pretokenizers"].is_array()) {
      return Corrupt(source, "pre_tokenizer Sequence has no pretokenizers list");
    }
    for (const auto& child : config["pretokenizers"]) {
      if (absl::Status s = Add(child, source); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (type != "Split") return Unsupported(source, absl::StrCat("pre_tokenizer type '", type, "'"));
  absl::StatusOr<std::string> pattern = LiteralPattern(config, source, "pre_tokenizer Split");
  if (!pattern.ok()) return pattern.status();
  Step step;
  step.pattern = *std::move(pattern);
  std::string behavior = "Isolated";
  if (config.contains("behavior") && !config["behavior"].is_null()) {
    if (!config["behavior"].is_string()) {
      return Corrupt(source, absl::StrCat("pre_tokenizer Split behavior must be a string, got ",
                                          Shown(config["behavior"])));
    }
    behavior = config["behavior"].get<std::string>();
  }
  if (behavior == "Removed") {
    step.behavior = Behavior::kRemoved;
  } else if (behavior == "Isolated") {
    step.behavior = Behavior::kIsolated;
  } else if (behavior == "MergedWithPrevious") {
    step.behavior = Behavior::kMergedWithPrevious;
  } else if (behavior == "MergedWithNext") {
    step.behavior = Behavior::kMergedWithNext;
  } else if (behavior == "Contiguous") {
    step.behavior = Behavior::kContiguous;
  } else {
    return Unsupported(source, absl::StrCat("pre_tokenizer Split behavior '", behavior, "'"));
  }
  step.invert = false;
  if (config.contains("invert") && !config["invert"].is_null()) {
    if (!config["invert"].is_boolean()) {
      return Corrupt(source, absl::StrCat("pre_tokenizer Split invert must be a boolean, got ",
                                          Shown(config["invert"])));
    }
    step.invert = config["invert"].get<bool>();
  }
  steps_.push_back(std::move(step));
  return absl::OkStatus();
}

void PreTokenizer::SplitOne(const Step& step, std::string_view text, std::vector<std::string_view>* out) {
  struct Span {
    size_t begin, end;
    bool delimiter;
  };
  std::vector<Span> spans;
  size_t pos = 0;
  for (size_t hit = text.find(step.pattern); hit != std::string_view::npos;
       hit = text.find(step.pattern, pos)) {
    if (hit > pos) spans.push_back({pos, hit, step.invert});
    spans.push_back({hit, hit + step.pattern.size(), !step.invert});
    pos = hit + step.pattern.size();
  }
  if (pos < text.size()) spans.push_back({pos, text.size(), step.invert});

  // Fold delimiters into pieces the way Hugging Face's SplitDelimiterBehavior does.
  std::vector<Span> pieces;
  switch (step.behavior) {
    case Behavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.delimiter) pieces.push_back(s);
      }
      break;
    case Behavior::kIsolated:
      pieces = spans;
      break;
    case Behavior::kMergedWithPrevious: {
      bool previous_delimiter = false;
      for (const Span& s : spans) {
        if (s.delimiter && !previous_delimiter && !pieces.empty()) {
          pieces.back().end = s.end;
        } else {
          pieces.push_back(s);
        }
        previous_delimiter = s.delimiter;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous_delimiter = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->delimiter && !previous_delimiter && !pieces.empty()) {
          pieces.back().begin = it->begin;
        } else {
          pieces.push_back(*it);
        }
        previous_delimiter = it->delimiter;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
    case Behavior::kContiguous: {
      bool previous_delimiter = false;
      for (const Span& s : spans) {
        if (!pieces.empty() && s.delimiter == previous_delimiter) {
          pieces.back().end = s.end;
        } else {
          pieces.push_back(s);
        }
        previous_delimiter = s.delimiter;
      }
      break;
    }
  }
  for (const Span& s : pieces) {
    if (s.end > s.begin) out->push_back(text.substr(s.begin, s.end - s.begin));
  }
}

void PreTokenizer::Split(std::string_view text, std::vector<std::string_view>* out) const {
  if (text.empty()) return;
  std::vector<std::string_view> current{text};
  std::vector<std::string_view> next;
  for (const Step& step : steps_) {
    next.clear();
    for (std::string_view piece : current) SplitOne(step, piece, &next);
    current.swap(next);
  }
  out->insert(out->end(), current.begin(), current.end());
}

absl::StatusOr<TokenDecoder> TokenDecoder::FromJson(const nlohmann::json& config, const std::string& source) {
  if (config.is_null()) return Unsupported(source, "tokenizer without a decoder");
  TokenDecoder d;
  bool fused = false;
  if (absl::Status s = d.Add(config, source, &fused); !s.ok()) return s;
  return d;
}

absl::Status TokenDecoder::Add(const nlohmann::json& config, const std::string& source, bool* fused) {
  const std::string type = TypeOf(config);
  if (type == "Sequence") {
    if (!config.contains("decoders") || !config["decoders"].is_array()) {
      return Corrupt(source, "decoder Sequence has no decoders list");
    }
    for (const auto& child : config["decoders"]) {
      if (absl::Status s = Add(child, source, fused); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (*fused) return Unsupported(source, absl::StrCat("decoder '", type, "' after Fuse"));
  if (type == "Fuse") {
    *fused = true;
    return absl::OkStatus();
  }
  if (type == "ByteFallback") {
    if (byte_fallback_) return Unsupported(source, "decoder with two ByteFallback steps");
    byte_fallback_ = true;
    return absl::OkStatus();
  }
  if (type == "Replace") {
    if (byte_fallback_) return Unsupported(source, "decoder Replace after ByteFallback");
    absl::StatusOr<std::string> pattern = LiteralPattern(config, source, "decoder Replace");
    if (!pattern.ok()) return pattern.status();
    absl::StatusOr<std::string> content = ReplacementContent(config, source, "decoder Replace");
    if (!content.ok()) return content.status();
    replacements_.emplace_back(*std::move(pattern), *std::move(content));
    return absl::OkStatus();
  }
  return Unsupported(source, absl::StrCat("decoder type '", type, "'"));
}

std::string TokenDecoder::Transform(std::string_view token) const {
  if (replacements_.empty()) return std::string(token);
  std::string current(token);
  for (const auto& [from, to] : replacements_) current = ReplaceAllLiteral(current, from, to);
  return current;
}

int TokenDecoder::ByteValue(std::string_view transformed) const {
  return byte_fallback_ ? JsByteTokenValue(transformed) : -1;
}

int JsByteTokenValue(std::string_view token) {
  if (token.size() < 6 || token.substr(0, 3) != "<0x" || token.back() != '>') return -1;
  if (Utf16Length(token) != 6) return -1;
  // parseInt(s, 16): leading whitespace, an optional sign, an optional 0x prefix, then hex digits.
  const std::string_view digits_text = token.substr(3, token.size() - 4);
  std::u32string s;
  for (size_t pos = 0; pos < digits_text.size();) s.push_back(NextCodePoint(digits_text, &pos));
  size_t i = 0;
  while (i < s.size() && IsJsWhitespace(s[i])) ++i;
  int sign = 1;
  if (i < s.size() && (s[i] == U'+' || s[i] == U'-')) {
    if (s[i] == U'-') sign = -1;
    ++i;
  }
  if (i + 1 < s.size() && s[i] == U'0' && (s[i + 1] == U'x' || s[i + 1] == U'X')) i += 2;
  int value = 0;
  int ndigits = 0;
  for (; i < s.size(); ++i, ++ndigits) {
    const char32_t c = s[i];
    int d;
    if (c >= U'0' && c <= U'9') {
      d = static_cast<int>(c - U'0');
    } else if (c >= U'a' && c <= U'f') {
      d = static_cast<int>(c - U'a') + 10;
    } else if (c >= U'A' && c <= U'F') {
      d = static_cast<int>(c - U'A') + 10;
    } else {
      break;
    }
    value = value * 16 + d;
  }
  if (ndigits == 0) return -1;
  // Uint8Array.from wraps the (possibly negative) number modulo 256.
  return ((sign * value) % 256 + 256) % 256;
}

}  // namespace layerpipe
