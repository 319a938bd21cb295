#include "engine/tokenizer/utf8.h"

namespace layerpipe {

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

void Utf8StreamDecoder::Emit(char32_t cp, std::string* out) {
  const bool first = !seen_first_;
  seen_first_ = true;
  if (first && strip_leading_bom_ && cp == 0xFEFF) return;
  AppendUtf8(cp, out);
}

void Utf8StreamDecoder::Feed(uint8_t byte, std::string* out) {
  if (needed_ == 0) {
    if (byte < 0x80) {
      Emit(byte, out);
    } else if (byte >= 0xC2 && byte <= 0xDF) {
      needed_ = 1;
      cp_ = byte & 0x1F;
    } else if (byte >= 0xE0 && byte <= 0xEF) {
      if (byte == 0xE0) lower_ = 0xA0;
      if (byte == 0xED) upper_ = 0x9F;
      needed_ = 2;
      cp_ = byte & 0x0F;
    } else if (byte >= 0xF0 && byte <= 0xF4) {
      if (byte == 0xF0) lower_ = 0x90;
      if (byte == 0xF4) upper_ = 0x8F;
      needed_ = 3;
      cp_ = byte & 0x07;
    } else {
      Emit(kReplacementChar, out);
    }
    return;
  }
  if (byte < lower_ || byte > upper_) {
    // The sequence so far is a maximal invalid subpart; the offending byte starts afresh.
    needed_ = 0;
    cp_ = 0;
    lower_ = 0x80;
    upper_ = 0xBF;
    Emit(kReplacementChar, out);
    Feed(byte, out);
    return;
  }
  lower_ = 0x80;
  upper_ = 0xBF;
  cp_ = (cp_ << 6) | (byte & 0x3F);
  if (--needed_ == 0) {
    Emit(cp_, out);
    cp_ = 0;
  }
}

void Utf8StreamDecoder::Finish(std::string* out) {
  if (needed_ != 0) {
    needed_ = 0;
    cp_ = 0;
    lower_ = 0x80;
    upper_ = 0xBF;
    Emit(kReplacementChar, out);
  }
  seen_first_ = false;
}

bool IsValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + len > n) return false;
    if (p[i + 1] < lo || p[i + 1] > hi) return false;
    for (size_t k = 2; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

std::string SanitizeUtf8(std::string_view s) {
  if (IsValidUtf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 16);
  Utf8StreamDecoder decoder(/*strip_leading_bom=*/false);
  for (char c : s) decoder.Feed(static_cast<uint8_t>(c), &out);
  decoder.Finish(&out);
  return out;
}

char32_t NextCodePoint(std::string_view s, size_t* pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + *pos;
  const uint8_t b = p[0];
  if (b < 0x80) {
    *pos += 1;
    return b;
  }
  if ((b & 0xE0) == 0xC0) {
    *pos += 2;
    return (char32_t(b & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if ((b & 0xF0) == 0xE0) {
    *pos += 3;
    return (char32_t(b & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  *pos += 4;
  return (char32_t(b & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) | (char32_t(p[2] & 0x3F) << 6) |
         (p[3] & 0x3F);
}

size_t Utf16Length(std::string_view s) {
  size_t units = 0;
  for (char c : s) {
    const auto b = static_cast<uint8_t>(c);
    if ((b & 0xC0) != 0x80) units += 1;  // every lead byte starts a character
    if ((b & 0xF8) == 0xF0) units += 1;  // astral characters take a surrogate pair
  }
  return units;
}

bool IsJsWhitespace(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20:
    case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000: case 0xFEFF:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::string_view TrimJsWhitespaceStart(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t next = pos;
    if (!IsJsWhitespace(NextCodePoint(s, &next))) break;
    pos = next;
  }
  return s.substr(pos);
}

std::string_view TrimJsWhitespaceEnd(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    size_t pos = start;
    if (!IsJsWhitespace(NextCodePoint(s, &pos))) break;
    end = start;
  }
  return s.substr(0, end);
}

bool IsWordChar(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= '0' && cp <= '9') || (cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z') || cp == '_';
  }
  if (cp == 0x85 || IsJsWhitespace(cp)) return false;
  if (cp <= 0xBF) return cp == 0xAA || cp == 0xB5 || cp == 0xBA;
  if (cp == 0xD7 || cp == 0xF7) return false;
  if (cp >= 0x2000 && cp <= 0x206F) {
    return cp == 0x200C || cp == 0x200D || cp == 0x203F || cp == 0x2040 || cp == 0x2054;
  }
  if (cp >= 0x20A0 && cp <= 0x20CF) return false;  // currency signs
  if (cp >= 0x2190 && cp <= 0x2BFF) return false;  // arrows, math operators, shapes, dingbats
  if (cp >= 0x2E00 && cp <= 0x2E7F) return false;  // supplemental punctuation
  if (cp >= 0x3000 && cp <= 0x303F) {
    return (cp >= 0x3005 && cp <= 0x3007) || (cp >= 0x3021 && cp <= 0x302F) || (cp >= 0x3031 && cp <= 0x3035) ||
           (cp >= 0x3038 && cp <= 0x303C);
  }
  if (cp >= 0xFE30 && cp <= 0xFE4F) return cp == 0xFE33 || cp == 0xFE34 || cp >= 0xFE4D;
  if (cp >= 0xFF01 && cp <= 0xFF0F) return false;
  if (cp >= 0xFF1A && cp <= 0xFF20) return false;
  if (cp >= 0xFF3B && cp <= 0xFF40) return cp == 0xFF3F;
  if (cp >= 0xFF5B && cp <= 0xFF65) return false;
  if (cp >= 0x1F000 && cp <= 0x1FAFF) return false;  // emoji and pictographs
  return true;
}

}  // namespace layerpipe
