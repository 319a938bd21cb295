#include "engine/media/exif_orientation.h"

#include <libexif/exif-data.h>

#include <cstring>
#include <memory>

namespace layerpipe::media_internal {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

std::optional<int> ExifOrientation(std::string_view exif) {
  // libexif finds the TIFF data after an "Exif\0\0" header (or in a JPEG stream, which this is not).
  if (exif.size() < 6 || std::memcmp(exif.data(), "Exif\0\0", 6) != 0) return std::nullopt;
  std::unique_ptr<ExifData, decltype(&exif_data_unref)> data(exif_data_new(), exif_data_unref);
  if (!data) return std::nullopt;
  // As read, not "fixed": following the specification would add or drop entries, and Pillow reads the
  // tags as they are.
  exif_data_unset_option(data.get(), EXIF_DATA_OPTION_FOLLOW_SPECIFICATION);
  exif_data_unset_option(data.get(), EXIF_DATA_OPTION_IGNORE_UNKNOWN_TAGS);
  exif_data_load_data(data.get(), reinterpret_cast<const unsigned char*>(exif.data()),
                      static_cast<unsigned int>(exif.size()));
  // IFD0 only, as Pillow's exif.get(0x0112): not the thumbnail's IFD1.
  ExifEntry* e = exif_content_get_entry(data->ifd[EXIF_IFD_0], EXIF_TAG_ORIENTATION);
  if (e == nullptr || e->components != 1 || e->data == nullptr) return std::nullopt;
  const ExifByteOrder order = exif_data_get_byte_order(data.get());
  const size_t need = exif_format_get_size(e->format);
  if (need == 0 || e->size < need) return std::nullopt;
  switch (e->format) {
    case EXIF_FORMAT_SHORT: return exif_get_short(e->data, order);
    case EXIF_FORMAT_SSHORT: return exif_get_sshort(e->data, order);
    case EXIF_FORMAT_LONG: return static_cast<int>(exif_get_long(e->data, order) & 0x7fffffff);
    case EXIF_FORMAT_SLONG: return exif_get_slong(e->data, order);
    case EXIF_FORMAT_BYTE: return e->data[0];
    default: return std::nullopt;  // a rational or a string: Pillow finds no method for it either
  }
}

std::optional<int> XmpOrientation(std::string_view xmp) {
  constexpr std::string_view kTag = "tiff:Orientation";
  for (size_t at = xmp.find(kTag); at != std::string_view::npos; at = xmp.find(kTag, at + 1)) {
    std::string_view rest = xmp.substr(at + kTag.size());
    if (rest.substr(0, 2) == "=\"") {
      rest.remove_prefix(2);
    } else if (rest.substr(0, 1) == ">") {
      rest.remove_prefix(1);
    } else {
      continue;
    }
    if (!rest.empty() && rest[0] >= '0' && rest[0] <= '9') return rest[0] - '0';
  }
  return std::nullopt;
}

std::optional<std::string> RawProfileExif(std::string_view text) {
  // Pillow: bytes.fromhex("".join(text.split("\n")[3:])), which skips whitespace between byte pairs.
  for (int line = 0; line < 3; ++line) {
    const size_t nl = text.find('\n');
    if (nl == std::string_view::npos) return std::nullopt;
    text.remove_prefix(nl + 1);
  }
  std::string out;
  out.reserve(text.size() / 2 + 6);
  for (size_t i = 0; i < text.size();) {
    if (IsSpace(text[i])) {
      ++i;
      continue;
    }
    if (i + 1 >= text.size()) return std::nullopt;
    const int hi = HexDigit(text[i]), lo = HexDigit(text[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi << 4 | lo));
    i += 2;
  }
  if (out.size() < 6 || out.compare(0, 6, std::string("Exif\0\0", 6)) != 0) out.insert(0, std::string("Exif\0\0", 6));
  return out;
}

RgbImage ApplyOrientation(RgbImage in, int orientation) {
  if (orientation < 2 || orientation > 8) return in;
  const int64_t w = in.width, h = in.height;
  const bool swap = orientation >= 5;  // TRANSPOSE, ROTATE_270, TRANSVERSE, ROTATE_90
  RgbImage out;
  out.width = swap ? h : w;
  out.height = swap ? w : h;
  out.rgb.resize(in.rgb.size());
  for (int64_t y = 0; y < out.height; ++y) {
    for (int64_t x = 0; x < out.width; ++x) {
      int64_t sx = 0, sy = 0;  // the source pixel of output (x, y)
      switch (orientation) {
        case 2: sx = w - 1 - x; sy = y; break;          // FLIP_LEFT_RIGHT
        case 3: sx = w - 1 - x; sy = h - 1 - y; break;  // ROTATE_180
        case 4: sx = x; sy = h - 1 - y; break;          // FLIP_TOP_BOTTOM
        case 5: sx = y; sy = x; break;                  // TRANSPOSE
        case 6: sx = y; sy = h - 1 - x; break;          // ROTATE_270 (90 degrees clockwise)
        case 7: sx = w - 1 - y; sy = h - 1 - x; break;  // TRANSVERSE
        case 8: sx = w - 1 - y; sy = x; break;          // ROTATE_90 (counter-clockwise)
      }
      std::memcpy(&out.rgb[3 * (y * out.width + x)], &in.rgb[3 * (sy * w + sx)], 3);
    }
  }
  return out;
}

}  // namespace layerpipe::media_internal
