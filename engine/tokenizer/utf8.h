// UTF-8 helpers for the tokenizer. The reference tokenizer runs on JavaScript strings and decodes byte
// runs with TextDecoder, so invalid input is handled the way the WHATWG Encoding Standard prescribes
// (one U+FFFD per maximal invalid subpart), and "whitespace" means what String.prototype.trim strips.
#ifndef LAYERPIPE_ENGINE_TOKENIZER_UTF8_H_
#define LAYERPIPE_ENGINE_TOKENIZER_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace layerpipe {

inline constexpr char32_t kReplacementChar = 0xFFFD;

void AppendUtf8(char32_t cp, std::string* out);

// Incremental WHATWG UTF-8 decoder. Output for a prefix of the input never changes once emitted, which is
// what lets streaming detokenization agree byte for byte with a one-shot decode.
class Utf8StreamDecoder {
 public:
  // With strip_leading_bom, a U+FEFF that is the first decoded character is dropped (TextDecoder's default).
  explicit Utf8StreamDecoder(bool strip_leading_bom) : strip_leading_bom_(strip_leading_bom) {}

  void Feed(uint8_t byte, std::string* out);
  // End of input: an unfinished sequence becomes one U+FFFD. The decoder is then ready for a new input.
  void Finish(std::string* out);
  bool mid_sequence() const { return needed_ != 0; }

 private:
  void Emit(char32_t cp, std::string* out);

  bool strip_leading_bom_;
  bool seen_first_ = false;
  char32_t cp_ = 0;
  int needed_ = 0;
  uint8_t lower_ = 0x80;
  uint8_t upper_ = 0xBF;
};

bool IsValidUtf8(std::string_view s);

// Replaces every invalid subpart with U+FFFD, exactly as TextDecoder (no BOM stripping) would.
std::string SanitizeUtf8(std::string_view s);

// Decodes the code point at s[*pos] of valid UTF-8 and advances *pos past it.
char32_t NextCodePoint(std::string_view s, size_t* pos);

// Byte length of the UTF-8 sequence introduced by lead byte `b` (1 for invalid leads).
inline size_t Utf8SequenceLength(uint8_t b) {
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) return 2;
  if ((b & 0xF0) == 0xE0) return 3;
  if ((b & 0xF8) == 0xF0) return 4;
  return 1;
}

// Number of UTF-16 code units of valid UTF-8 text (JavaScript's String.length).
size_t Utf16Length(std::string_view s);

// The WhiteSpace and LineTerminator characters of ECMAScript, i.e. what trim()/trimStart()/trimEnd() remove.
bool IsJsWhitespace(char32_t cp);
std::string_view TrimJsWhitespaceStart(std::string_view s);
std::string_view TrimJsWhitespaceEnd(std::string_view s);

// Approximation of a regex \w character (letters, marks, digits, connector punctuation) without Unicode
// tables: ASCII [A-Za-z0-9_], and any non-ASCII code point outside whitespace and the common punctuation,
// symbol and emoji blocks.
bool IsWordChar(char32_t cp);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_TOKENIZER_UTF8_H_
