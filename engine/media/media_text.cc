#include "engine/media/media_text.h"

#include "absl/strings/str_format.h"

namespace layerpipe::media_internal {

std::string FormatBytes(int64_t bytes) {
  constexpr int64_t kMiB = 1 << 20;
  if (bytes >= kMiB && bytes % kMiB == 0) return absl::StrFormat("%d MiB", bytes / kMiB);
  if (bytes >= kMiB) return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / kMiB);
  return absl::StrFormat("%d bytes", bytes);
}

std::string FirstBytes(std::string_view bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size() && i < 4; ++i) {
    absl::StrAppendFormat(&out, "%s%02x", i ? " " : "", static_cast<uint8_t>(bytes[i]));
  }
  return out;
}

const char* SniffFormat(std::string_view b) {
  auto at = [&](size_t offset, std::string_view magic) {
    return b.size() >= offset + magic.size() && b.substr(offset, magic.size()) == magic;
  };
  auto byte = [&](size_t i) { return i < b.size() ? static_cast<uint8_t>(b[i]) : 0; };
  if (at(0, "GIF8")) return "GIF";
  if (at(0, "RIFF") && at(8, "WEBP")) return "WebP";
  if (at(0, "RIFF") && at(8, "WAVE")) return "WAV";
  if (at(0, "RIFF") && at(8, "AVI ")) return "AVI";
  if (at(0, "BM")) return "BMP";
  if (at(0, std::string_view("II*\0", 4)) || at(0, std::string_view("MM\0*", 4))) return "TIFF";
  if (at(4, "ftypavif") || at(4, "ftypavis")) return "AVIF";
  if (at(4, "ftyphei") || at(4, "ftypmif1") || at(4, "ftypmsf1")) return "HEIF";
  if (at(4, "ftyp")) return "MP4/QuickTime";
  if (at(0, std::string_view("\0\0\0\x0cjP  ", 8)) || at(0, "\xff\x4f\xff\x51")) return "JPEG 2000";
  if (at(0, std::string_view("\0\0\0\x0cJXL ", 8)) || at(0, "\xff\x0a")) return "JPEG XL";
  if (at(0, std::string_view("\0\0\1\0", 4))) return "ICO";
  if (at(0, "8BPS")) return "PSD";
  if (at(0, "qoif")) return "QOI";
  if (at(0, "%PDF")) return "PDF";
  if (at(0, "\x89PNG")) return "PNG";
  if (at(0, "\xff\xd8\xff")) return "JPEG";
  if (at(0, "ID3") || (byte(0) == 0xff && (byte(1) & 0xe0) == 0xe0)) return "MP3";  // a tag, or a frame sync
  if (at(0, "OggS")) return "Ogg";
  if (at(0, "fLaC")) return "FLAC";
  if (at(0, "FORM") && (at(8, "AIFF") || at(8, "AIFC"))) return "AIFF";
  if (at(0, std::string_view("\x1a\x45\xdf\xa3", 4))) return "Matroska/WebM";
  if (at(0, "<")) return "text/SVG";
  return "";
}

}  // namespace layerpipe::media_internal
