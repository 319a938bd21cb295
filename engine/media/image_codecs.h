// The PNG and JPEG readers behind DecodeImage: RGB pixels as Pillow's convert("RGB") gives them, and the
// metadata that may carry an orientation. Each checks the pixel limit from the header before decoding.
#ifndef LAYERPIPE_ENGINE_MEDIA_IMAGE_CODECS_H_
#define LAYERPIPE_ENGINE_MEDIA_IMAGE_CODECS_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/media/image.h"
#include "engine/media/media_limits.h"

namespace layerpipe::media_internal {

struct DecodedImage {
  RgbImage image;  // as stored, before the orientation is applied
  // "Exif\0\0" + TIFF: JPEG's first Exif APP1, PNG's eXIf chunk or its "Raw profile type exif" text.
  std::optional<std::string> exif;
  std::optional<std::string> xmp;  // PNG's "XML:com.adobe.xmp" text, which Pillow also reads an orientation from
};

absl::StatusOr<DecodedImage> DecodePng(std::string_view bytes, const MediaLimits& limits);
absl::StatusOr<DecodedImage> DecodeJpeg(std::string_view bytes, const MediaLimits& limits);

// The decompression-bomb guard: OK when width*height is within limits.max_image_pixels.
absl::Status CheckImagePixels(int64_t width, int64_t height, const MediaLimits& limits);

}  // namespace layerpipe::media_internal

#endif  // LAYERPIPE_ENGINE_MEDIA_IMAGE_CODECS_H_
