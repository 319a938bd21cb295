// PNG through libpng. libpng reports errors by longjmp: everything it may jump out of runs in ReadPng /
// ReadPngEnd, whose state lives in a PngReader outside their frames, so nothing with a destructor is
// skipped and nothing read after the jump was changed in a register.
//
// Pixels follow Pillow's PngImagePlugin + convert("RGB"): alpha (and tRNS) dropped, gray replicated,
// 1/2/4-bit gray scaled to 8 bits, 16-bit samples to their high byte, palettes looked up in a 256-entry
// table that starts as a gray ramp (so an index past the PLTE reads (i, i, i), as in Pillow), no gamma or
// ICC applied.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/media/exif_orientation.h"
#include "engine/media/image_codecs.h"

namespace layerpipe::media_internal {
namespace {

struct PngReader {
  std::string_view bytes;
  size_t pos = 0;
  bool truncated = false;
  char message[256] = {};
  absl::Status limit;  // set when the header is over the pixel limit
  const MediaLimits* limits = nullptr;
  int64_t width = 0, height = 0;
  bool palette = false;
  std::vector<uint8_t> pixels;  // RGB, or palette indices
  uint8_t table[256][3] = {};
};

void OnError(png_structp png, png_const_charp message) {
  auto* r = static_cast<PngReader*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof r->message, "%s", message);
  png_longjmp(png, 1);
}

// Warnings concern ancillary chunks (bad CRCs, misplaced chunks, odd profiles) that libpng skips; Pillow
// ignores them too.
void OnWarning(png_structp, png_const_charp) {}

void OnRead(png_structp png, png_bytep out, size_t n) {
  auto* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (n > r->bytes.size() - r->pos) {
    r->truncated = true;
    png_error(png, "file ends early");
  }
  std::memcpy(out, r->bytes.data() + r->pos, n);
  r->pos += n;
}

bool ReadPng(png_structp png, png_infop info, PngReader* r) {
  if (setjmp(png_jmpbuf(png))) return false;
  // Our pixel limit applies instead of libpng's 1,000,000-per-side default, with its own message.
  png_set_user_limits(png, PNG_UINT_31_MAX, PNG_UINT_31_MAX);
  png_read_info(png, info);
  png_uint_32 w = 0, h = 0;
  int depth = 0, color = 0;
  png_get_IHDR(png, info, &w, &h, &depth, &color, nullptr, nullptr, nullptr);
  r->width = w;
  r->height = h;
  r->limit = CheckImagePixels(w, h, *r->limits);
  if (!r->limit.ok()) return false;

  if (depth == 16) png_set_strip_16(png);
  r->palette = color == PNG_COLOR_TYPE_PALETTE;
  if (r->palette) {
    png_set_packing(png);  // 1/2/4-bit indices to a byte each; looked up below, not by libpng
    for (int i = 0; i < 256; ++i) r->table[i][0] = r->table[i][1] = r->table[i][2] = static_cast<uint8_t>(i);
    png_colorp plte = nullptr;
    int n = 0;
    if (png_get_PLTE(png, info, &plte, &n) & PNG_INFO_PLTE) {
      for (int i = 0; i < n && i < 256; ++i) {
        r->table[i][0] = plte[i].red;
        r->table[i][1] = plte[i].green;
        r->table[i][2] = plte[i].blue;
      }
    }
  } else {
    // Gray expansion without tRNS-to-alpha: transparency is dropped anyway.
    if ((color & PNG_COLOR_MASK_COLOR) == 0) {
      if (depth < 8) png_set_expand_gray_1_2_4_to_8(png);
      png_set_gray_to_rgb(png);
    }
    if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
  }
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const size_t channels = r->palette ? 1 : 3;
  if (png_get_bit_depth(png, info) != 8 || png_get_channels(png, info) != channels ||
      png_get_rowbytes(png, info) != w * channels) {
    png_error(png, "unexpected row layout after libpng's transformations");
  }
  // png_read_image's loop without its table of row pointers, which for a 1-pixel-wide image within the
  // pixel limit would be 400 MB on top of the 150 MB of pixels. Each Adam7 pass adds to the rows in place.
  const size_t stride = static_cast<size_t>(w) * channels;
  r->pixels.resize(stride * h);
  for (int pass = 0; pass < passes; ++pass) {
    for (png_uint_32 y = 0; y < h; ++y) png_read_row(png, r->pixels.data() + y * stride, nullptr);
  }
  return true;
}

// The chunks after IDAT (Pillow reads an eXIf or text there too). Errors here are ignored, as Pillow
// ignores a file that breaks off after its image data.
void ReadPngEnd(png_structp png, png_infop info) {
  if (setjmp(png_jmpbuf(png))) return;
  png_read_end(png, info);
}

void CollectMetadata(png_structp png, png_infop info, DecodedImage* out) {
  png_bytep exif = nullptr;
  png_uint_32 exif_size = 0;
  if (png_get_eXIf_1(png, info, &exif_size, &exif) & PNG_INFO_eXIf) {
    out->exif = std::string("Exif\0\0", 6) + std::string(reinterpret_cast<const char*>(exif), exif_size);
  }
  png_textp text = nullptr;
  int n = 0;
  png_get_text(png, info, &text, &n);
  for (int i = 0; i < n; ++i) {  // later chunks win, as in Pillow's info dict
    const size_t size = text[i].compression >= PNG_ITXT_COMPRESSION_NONE ? text[i].itxt_length : text[i].text_length;
    const std::string_view value(text[i].text ? text[i].text : "", text[i].text ? size : 0);
    if (std::strcmp(text[i].key, "XML:com.adobe.xmp") == 0) {
      out->xmp = std::string(value);
    } else if (!out->exif && std::strcmp(text[i].key, "Raw profile type exif") == 0) {
      if (auto raw = RawProfileExif(value)) out->exif = *raw;
    }
  }
}

uint32_t Be32(std::string_view b, size_t at) {
  const auto* p = reinterpret_cast<const uint8_t*>(b.data()) + at;
  return static_cast<uint32_t>(p[0]) << 24 | p[1] << 16 | p[2] << 8 | p[3];
}

// A chunk type as its four letters, or in hex when it is not letters (a corrupt file).
std::string ChunkName(std::string_view type) {
  for (char c : type) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) return absl::StrFormat("0x%08x", Be32(type, 0));
  }
  return std::string(type);
}

// libpng (1.6.39) allocates an ancillary chunk's declared length before reading it, and past its 8 MB
// chunk limit only warns (a benign error): a 200-byte file declaring a 1.8 GB iTXt costs 1.8 GB. So the
// chunk lengths are walked first. A chunk before the image data that runs past the end of the file makes
// it truncated (as Pillow finds); one after the image data means the chunks there are not read (Pillow
// ignores a broken tail too). IDAT itself is streamed, and a short one left to libpng to report.
struct ChunkWalk {
  absl::Status status;
  bool tail_fits = true;
};

ChunkWalk WalkChunks(std::string_view bytes) {
  ChunkWalk walk;
  bool seen_idat = false;
  for (size_t pos = 8; pos + 8 <= bytes.size();) {
    const uint32_t length = Be32(bytes, pos);
    const std::string_view type = bytes.substr(pos + 4, 4);
    if (length > PNG_UINT_31_MAX) break;  // libpng refuses it before allocating
    if (type == "IDAT") seen_idat = true;
    if (length + size_t{12} > bytes.size() - pos) {
      if (type == "IDAT") break;
      if (!seen_idat) {
        walk.status = absl::InvalidArgumentError(
            absl::StrCat("truncated PNG: chunk ", ChunkName(type), " of ", length, " bytes at byte ", pos,
                         " runs past the end of the file (", bytes.size(), " bytes)"));
      }
      walk.tail_fits = false;
      break;
    }
    if (type == "IEND") break;
    pos += length + size_t{12};
  }
  return walk;
}

}  // namespace

absl::StatusOr<DecodedImage> DecodePng(std::string_view bytes, const MediaLimits& limits) {
  // The pixel limit from IHDR itself (always the first chunk), before libpng reads the chunks up to the
  // image data; sizes past 2^31 are left to libpng to refuse.
  if (bytes.size() >= 24 && bytes.substr(12, 4) == "IHDR") {
    const uint32_t w = Be32(bytes, 16), h = Be32(bytes, 20);
    if (w <= PNG_UINT_31_MAX && h <= PNG_UINT_31_MAX) {
      if (absl::Status s = CheckImagePixels(w, h, limits); !s.ok()) return s;
    }
  }
  const ChunkWalk walk = WalkChunks(bytes);
  if (!walk.status.ok()) return walk.status;
  PngReader r;
  r.bytes = bytes;
  r.limits = &limits;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, OnError, OnWarning);
  if (png == nullptr) return absl::ResourceExhaustedError("PNG: cannot allocate libpng's reader");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return absl::ResourceExhaustedError("PNG: cannot allocate libpng's reader");
  }
  png_set_read_fn(png, &r, OnRead);
  const bool ok = ReadPng(png, info, &r);
  DecodedImage out;
  if (ok) {
    if (walk.tail_fits) ReadPngEnd(png, info);
    CollectMetadata(png, info, &out);
  }
  png_destroy_read_struct(&png, &info, nullptr);
  if (!r.limit.ok()) return r.limit;
  if (!ok && r.truncated) {
    return absl::InvalidArgumentError(absl::StrCat("truncated PNG: the file ends after ", bytes.size(), " bytes"));
  }
  if (!ok) return absl::InvalidArgumentError(absl::StrCat("invalid PNG: ", r.message));

  out.image.width = r.width;
  out.image.height = r.height;
  if (!r.palette) {
    out.image.rgb = std::move(r.pixels);
  } else {
    out.image.rgb.resize(r.pixels.size() * 3);
    for (size_t i = 0; i < r.pixels.size(); ++i) std::memcpy(&out.image.rgb[3 * i], r.table[r.pixels[i]], 3);
  }
  return out;
}

}  // namespace layerpipe::media_internal
