// In-memory PNG, JPEG and WAV files for the tests of tests/media, written with the same libraries the
// media library reads with (libpng, libjpeg, libsndfile), so that no binary file is committed; and the
// check those tests make of a refused file's error.
#ifndef LAYERPIPE_TESTS_MEDIA_MEDIA_WRITERS_H_
#define LAYERPIPE_TESTS_MEDIA_MEDIA_WRITERS_H_

#include <cstdio>  // jpeglib.h needs FILE and size_t first

#include <jpeglib.h>
#include <png.h>
#include <sndfile.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace layerpipe::media_test {

// A refused file: InvalidArgument, its message holding `substring`.
inline void ExpectInvalid(const absl::Status& status, const std::string& substring) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr(substring));
}

struct PngSpec {
  int width = 0, height = 0;
  int color_type = PNG_COLOR_TYPE_RGB;
  int bit_depth = 8;
  bool interlaced = false;
  std::vector<png_color> palette;
  std::vector<uint8_t> trns;  // palette alpha table
  std::string exif;           // eXIf payload (TIFF, no "Exif\0\0")
  std::vector<uint8_t> data;  // rows of packed samples, without filter bytes; 16-bit big-endian
};

inline void PngAppend(png_structp png, png_bytep data, size_t n) {
  auto* out = static_cast<std::string*>(png_get_io_ptr(png));
  out->append(reinterpret_cast<const char*>(data), n);
}

inline std::string WritePng(const PngSpec& s) {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return "";
  }
  png_set_write_fn(png, &out, PngAppend, nullptr);
  png_set_user_limits(png, PNG_UINT_31_MAX, PNG_UINT_31_MAX);  // slivers past libpng's default 1 M rows
  png_set_IHDR(png, info, s.width, s.height, s.bit_depth, s.color_type,
               s.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!s.palette.empty()) png_set_PLTE(png, info, s.palette.data(), static_cast<int>(s.palette.size()));
  if (!s.trns.empty()) png_set_tRNS(png, info, s.trns.data(), static_cast<int>(s.trns.size()), nullptr);
  if (!s.exif.empty()) {
    png_set_eXIf_1(png, info, static_cast<png_uint_32>(s.exif.size()),
                   reinterpret_cast<png_bytep>(const_cast<char*>(s.exif.data())));
  }
  png_write_info(png, info);
  const size_t row = s.data.size() / s.height;
  std::vector<png_bytep> rows(s.height);
  for (int y = 0; y < s.height; ++y) rows[y] = const_cast<png_bytep>(s.data.data() + y * row);
  png_write_image(png, rows.data());
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  return out;
}

inline std::string WriteRgbPng(int width, int height, const std::vector<uint8_t>& rgb) {
  PngSpec s;
  s.width = width;
  s.height = height;
  s.data = rgb;
  return WritePng(s);
}

// TIFF data with one IFD0 entry, Orientation = `orientation` (little-endian), for eXIf or APP1.
inline std::string ExifTiff(int orientation) {
  const uint8_t tiff[] = {'I', 'I', 42, 0, 8, 0, 0, 0,                             // header, IFD0 at 8
                          1, 0,                                                    // one entry
                          0x12, 0x01, 3, 0, 1, 0, 0, 0, static_cast<uint8_t>(orientation), 0, 0, 0,  // SHORT
                          0, 0, 0, 0};                                             // no next IFD
  return std::string(reinterpret_cast<const char*>(tiff), sizeof tiff);
}

// components: 1 (gray) or 3 (RGB). exif_tiff: written as an APP1 "Exif\0\0" marker when not empty.
inline std::string WriteJpeg(int width, int height, int components, const std::vector<uint8_t>& pixels,
                             int quality = 95, const std::string& exif_tiff = "") {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = width;
  c.image_height = height;
  c.input_components = components;
  c.in_color_space = components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  if (!exif_tiff.empty()) {
    const std::string app1 = std::string("Exif\0\0", 6) + exif_tiff;
    jpeg_write_marker(&c, JPEG_APP0 + 1, reinterpret_cast<const JOCTET*>(app1.data()),
                      static_cast<unsigned>(app1.size()));
  }
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(pixels.data() + static_cast<size_t>(c.next_scanline) * width * components);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::string out(reinterpret_cast<const char*>(buf), size);
  free(buf);
  return out;
}

// A growing in-memory file for libsndfile's writer.
struct WavBuffer {
  std::string bytes;
  sf_count_t pos = 0;
};

inline sf_count_t WavLength(void* u) { return static_cast<WavBuffer*>(u)->bytes.size(); }
inline sf_count_t WavSeek(sf_count_t offset, int whence, void* u) {
  auto* b = static_cast<WavBuffer*>(u);
  b->pos = (whence == SEEK_SET ? 0 : whence == SEEK_CUR ? b->pos : static_cast<sf_count_t>(b->bytes.size())) + offset;
  return b->pos;
}
inline sf_count_t WavRead(void* out, sf_count_t n, void* u) {
  auto* b = static_cast<WavBuffer*>(u);
  const sf_count_t got = std::max<sf_count_t>(0, std::min<sf_count_t>(n, b->bytes.size() - b->pos));
  std::memcpy(out, b->bytes.data() + b->pos, got);
  b->pos += got;
  return got;
}
inline sf_count_t WavWrite(const void* in, sf_count_t n, void* u) {
  auto* b = static_cast<WavBuffer*>(u);
  if (b->pos + n > static_cast<sf_count_t>(b->bytes.size())) b->bytes.resize(b->pos + n);
  std::memcpy(b->bytes.data() + b->pos, in, n);
  b->pos += n;
  return n;
}
inline sf_count_t WavTell(void* u) { return static_cast<WavBuffer*>(u)->pos; }

// A WAV file of `format` (e.g. SF_FORMAT_WAV | SF_FORMAT_PCM_16) holding interleaved `samples`, given as
// doubles that libsndfile scales to the encoding (PCM: full scale is 1.0).
inline std::string WriteWav(int rate, int channels, int format, const std::vector<double>& samples) {
  WavBuffer buffer;
  SF_VIRTUAL_IO io{WavLength, WavSeek, WavRead, WavWrite, WavTell};
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = channels;
  info.format = format;
  SNDFILE* f = sf_open_virtual(&io, SFM_WRITE, &info, &buffer);
  if (f == nullptr) return "";
  sf_writef_double(f, samples.data(), static_cast<sf_count_t>(samples.size() / channels));
  sf_close(f);
  return buffer.bytes;
}

// 16-bit PCM from integers, so that a test knows the stored values exactly.
inline std::string WritePcm16(int rate, int channels, const std::vector<int16_t>& samples) {
  WavBuffer buffer;
  SF_VIRTUAL_IO io{WavLength, WavSeek, WavRead, WavWrite, WavTell};
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = channels;
  info.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  SNDFILE* f = sf_open_virtual(&io, SFM_WRITE, &info, &buffer);
  if (f == nullptr) return "";
  sf_writef_short(f, samples.data(), static_cast<sf_count_t>(samples.size() / channels));
  sf_close(f);
  return buffer.bytes;
}

}  // namespace layerpipe::media_test

#endif  // LAYERPIPE_TESTS_MEDIA_MEDIA_WRITERS_H_
