// JPEG through libjpeg(-turbo), the library and settings Pillow decodes with (JDCT_ISLOW, fancy
// upsampling: libjpeg's defaults), so the pixels are Pillow's. Pillow's modes: 1 component is L, 3 are
// RGB (libjpeg converts YCbCr), 4 are CMYK stored Adobe-inverted ("CMYK;I") and converted to RGB with
// Pillow's cmyk2rgb.
//
// libjpeg reports errors through error_exit, which must not return: it longjmps back to RunJpeg, whose
// state lives in a JpegReader outside its frame. Warnings that data ran out (the file ends, or a scan
// ends early) are truncation errors, as Pillow's "image file is truncated"; other warnings (extraneous
// bytes, which cameras write) are ignored as Pillow ignores them.
#include <cstdio>  // jpeglib.h needs FILE and size_t first

#include <jerror.h>
#include <jpeglib.h>

#include <csetjmp>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/media/image_codecs.h"

namespace layerpipe::media_internal {
namespace {

// libjpeg-turbo's own advice against files with thousands of tiny progressive scans, each of which costs
// a pass over the whole coefficient buffer; real encoders write at most a few dozen.
constexpr int kMaxScans = 1000;
// Beyond the pixel limit, a cap on libjpeg's own buffers (a progressive 50-Mpixel CMYK file needs ~400 MB).
constexpr long kMaxJpegMemory = 1L << 30;

struct JpegReader {
  jpeg_error_mgr errors;
  jpeg_progress_mgr progress;
  jmp_buf jump;
  bool created = false, truncated = false;
  char message[JMSG_LENGTH_MAX] = {};
  jpeg_decompress_struct cinfo;
  std::string_view bytes;
  const MediaLimits* limits = nullptr;
  absl::Status limit;  // set when the header is over the pixel limit, or the format is unsupported
  int components = 0;
  std::vector<uint8_t> pixels;  // as libjpeg gives them, `components` bytes each
  std::optional<std::string> exif;
};

JpegReader* Reader(j_common_ptr cinfo) { return static_cast<JpegReader*>(cinfo->client_data); }

void OnErrorExit(j_common_ptr cinfo) {
  (*cinfo->err->format_message)(cinfo, Reader(cinfo)->message);
  std::longjmp(Reader(cinfo)->jump, 1);
}

// Called by libjpeg's default emit_message for the first warning; keeps the text for a Status, never prints.
void OnOutputMessage(j_common_ptr cinfo) { (*cinfo->err->format_message)(cinfo, Reader(cinfo)->message); }

void OnEmitMessage(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  const int code = cinfo->err->msg_code;
  if (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER) {
    Reader(cinfo)->truncated = true;
    OnErrorExit(cinfo);
  }
  cinfo->err->num_warnings++;
}

void OnProgress(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number > kMaxScans) {
    std::snprintf(Reader(cinfo)->message, JMSG_LENGTH_MAX, "more than %d scans", kMaxScans);
    std::longjmp(Reader(cinfo)->jump, 1);
  }
}

bool RunJpeg(JpegReader* r) {
  if (setjmp(r->jump)) return false;
  jpeg_create_decompress(&r->cinfo);
  r->created = true;
  r->cinfo.mem->max_memory_to_use = kMaxJpegMemory;
  r->cinfo.progress = &r->progress;
  jpeg_mem_src(&r->cinfo, reinterpret_cast<const unsigned char*>(r->bytes.data()),
               static_cast<unsigned long>(r->bytes.size()));
  jpeg_save_markers(&r->cinfo, JPEG_APP0 + 1, 0xffff);
  jpeg_read_header(&r->cinfo, TRUE);
  r->limit = CheckImagePixels(r->cinfo.image_width, r->cinfo.image_height, *r->limits);
  if (!r->limit.ok()) return false;
  r->components = r->cinfo.num_components;
  switch (r->components) {
    case 1: r->cinfo.out_color_space = JCS_GRAYSCALE; break;
    case 3: r->cinfo.out_color_space = JCS_RGB; break;
    case 4: r->cinfo.out_color_space = JCS_CMYK; break;
    default:
      r->limit = absl::InvalidArgumentError(absl::StrCat("unsupported JPEG: ", r->components,
                                                         " color components (1, 3 or 4 are supported)"));
      return false;
  }
  r->cinfo.dct_method = JDCT_ISLOW;
  r->cinfo.do_fancy_upsampling = TRUE;
  // Pillow keeps the first APP1 that starts "Exif\0".
  for (jpeg_saved_marker_ptr m = r->cinfo.marker_list; m != nullptr; m = m->next) {
    if (m->marker == JPEG_APP0 + 1 && m->data_length >= 5 && std::memcmp(m->data, "Exif\0", 5) == 0) {
      r->exif = std::string(reinterpret_cast<const char*>(m->data), m->data_length);
      break;
    }
  }
  jpeg_start_decompress(&r->cinfo);
  const size_t row = static_cast<size_t>(r->cinfo.output_width) * r->cinfo.output_components;
  r->pixels.resize(row * r->cinfo.output_height);
  while (r->cinfo.output_scanline < r->cinfo.output_height) {
    JSAMPROW rows[1] = {r->pixels.data() + row * r->cinfo.output_scanline};
    jpeg_read_scanlines(&r->cinfo, rows, 1);
  }
  // No jpeg_finish_decompress: Pillow accepts a file whose image is complete whatever follows (even no
  // EOI), and reading on could only turn that into an error.
  return true;
}

// Pillow's cmyk2rgb (Convert.c) on "CMYK;I" input: the Adobe convention stores 255 - ink.
void CmykToRgb(const uint8_t* cmyk, size_t n, uint8_t* rgb) {
  auto muldiv255 = [](int a, int b) {
    const int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
  };
  for (size_t i = 0; i < n; ++i, cmyk += 4, rgb += 3) {
    const int nk = cmyk[3];  // 255 - (255 - stored)
    for (int c = 0; c < 3; ++c) {
      const int v = nk - muldiv255(255 - cmyk[c], nk);
      rgb[c] = static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
    }
  }
}

}  // namespace

absl::StatusOr<DecodedImage> DecodeJpeg(std::string_view bytes, const MediaLimits& limits) {
  JpegReader r;
  r.bytes = bytes;
  r.limits = &limits;
  r.cinfo.err = jpeg_std_error(&r.errors);
  r.cinfo.client_data = &r;
  r.errors.error_exit = OnErrorExit;
  r.errors.output_message = OnOutputMessage;
  r.errors.emit_message = OnEmitMessage;
  r.progress.progress_monitor = OnProgress;
  const bool ok = RunJpeg(&r);
  DecodedImage out;
  if (ok) {
    out.image.width = r.cinfo.output_width;
    out.image.height = r.cinfo.output_height;
  }
  if (r.created) jpeg_destroy_decompress(&r.cinfo);
  if (!r.limit.ok()) return r.limit;
  if (!ok && r.truncated) return absl::InvalidArgumentError(absl::StrCat("truncated JPEG: ", r.message));
  if (!ok) return absl::InvalidArgumentError(absl::StrCat("invalid JPEG: ", r.message));

  const size_t n = static_cast<size_t>(out.image.width) * out.image.height;
  if (r.components == 3) {
    out.image.rgb = std::move(r.pixels);
  } else {
    out.image.rgb.resize(n * 3);
    if (r.components == 1) {
      for (size_t i = 0; i < n; ++i) std::memset(&out.image.rgb[3 * i], r.pixels[i], 3);
    } else {
      CmykToRgb(r.pixels.data(), n, out.image.rgb.data());
    }
  }
  out.exif = std::move(r.exif);
  return out;
}

}  // namespace layerpipe::media_internal
