// DecodeImage and PrepareImage: limits, format dispatch, orientation, the vision target size.
#include "engine/media/image.h"

#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/media/exif_orientation.h"
#include "engine/media/image_codecs.h"
#include "engine/media/media_text.h"

namespace layerpipe {
namespace media_internal {

absl::Status CheckImagePixels(int64_t width, int64_t height, const MediaLimits& limits) {
  // width and height come from 31- and 16-bit header fields, so the product fits in int64.
  const int64_t pixels = width * height;
  if (pixels > limits.max_image_pixels) {
    return absl::InvalidArgumentError(absl::StrFormat("image is %dx%d = %d pixels, over the limit of %d", width,
                                                      height, pixels, limits.max_image_pixels));
  }
  return absl::OkStatus();
}

}  // namespace media_internal

namespace {

bool IsPng(std::string_view b) { return b.size() >= 8 && b.substr(0, 8) == "\x89PNG\r\n\x1a\n"; }
bool IsJpeg(std::string_view b) { return b.size() >= 3 && b.substr(0, 3) == "\xff\xd8\xff"; }

absl::Status NotAnImage(std::string_view bytes) {
  std::string message = absl::StrCat("not a PNG or JPEG image (first bytes ", media_internal::FirstBytes(bytes));
  const std::string_view format = media_internal::SniffFormat(bytes);
  if (!format.empty() && format != "PNG" && format != "JPEG") {
    absl::StrAppend(&message, ": ", std::string(format), " is not supported");
  }
  return absl::InvalidArgumentError(absl::StrCat(message, ")"));
}

}  // namespace

absl::StatusOr<RgbImage> DecodeImage(std::string_view bytes, const MediaLimits& limits) {
  if (bytes.empty()) return absl::InvalidArgumentError("empty image file (0 bytes)");
  if (static_cast<int64_t>(bytes.size()) > limits.max_image_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("image file is ", media_internal::FormatBytes(bytes.size()),
                                                   ", over the limit of ",
                                                   media_internal::FormatBytes(limits.max_image_bytes)));
  }
  absl::StatusOr<media_internal::DecodedImage> decoded;
  if (IsPng(bytes)) {
    decoded = media_internal::DecodePng(bytes, limits);
  } else if (IsJpeg(bytes)) {
    decoded = media_internal::DecodeJpeg(bytes, limits);
  } else {
    return NotAnImage(bytes);
  }
  if (!decoded.ok()) return decoded.status();
  // Pillow's getexif(): the EXIF block's Orientation; only when it has none, the XMP one.
  std::optional<int> orientation;
  if (decoded->exif) orientation = media_internal::ExifOrientation(*decoded->exif);
  if (!orientation && decoded->xmp) orientation = media_internal::XmpOrientation(*decoded->xmp);
  if (!orientation) return std::move(decoded->image);
  return media_internal::ApplyOrientation(std::move(decoded->image), *orientation);
}

ImageSize VisionTargetSize(int64_t height, int64_t width, int64_t max_soft_tokens, int64_t block) {
  // Bounds that keep every product below exact-double range; real budgets are 70..1120 tokens of 48.
  if (height <= 0 || width <= 0 || max_soft_tokens <= 0 || block <= 0 || max_soft_tokens > (1 << 20) ||
      block > (1 << 12) || height > (int64_t{1} << 31) || width > (int64_t{1} << 31)) {
    return {};
  }
  // The Hugging Face formula step by step in doubles, as Python evaluates it.
  const double target_px = static_cast<double>(max_soft_tokens * block * block);
  const double factor = std::sqrt(target_px / (static_cast<double>(height) * static_cast<double>(width)));
  const double side = static_cast<double>(block);
  ImageSize out;
  out.height = static_cast<int64_t>(std::floor(factor * static_cast<double>(height) / side)) * block;
  out.width = static_cast<int64_t>(std::floor(factor * static_cast<double>(width) / side)) * block;
  // One side rounds to 0 on extreme aspect ratios: one block across, and as many along as the aspect
  // ratio asks, at most the whole budget in one row.
  const int64_t max_blocks = max_soft_tokens;
  auto along = [&](int64_t long_side, int64_t short_side) {
    const double ratio = std::floor(static_cast<double>(long_side) / static_cast<double>(short_side));
    return (ratio >= static_cast<double>(max_blocks) ? max_blocks : static_cast<int64_t>(ratio)) * block;
  };
  if (out.height == 0 && out.width == 0) return {};  // cannot happen: the budget is at least one block
  if (out.height == 0) {
    out.height = block;
    out.width = along(width, height);
  } else if (out.width == 0) {
    out.width = block;
    out.height = along(height, width);
  }
  return out;
}

absl::StatusOr<RgbImage> PrepareImage(std::string_view bytes, const MediaLimits& limits) {
  absl::StatusOr<RgbImage> image = DecodeImage(bytes, limits);
  if (!image.ok()) return image.status();
  const ImageSize target = VisionTargetSize(image->height, image->width, limits.max_soft_tokens, limits.block);
  if (target.height == 0 || target.width == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("no vision target size for a %dx%d image with max_soft_tokens "
                                                      "%d and block %d",
                                                      image->width, image->height, limits.max_soft_tokens,
                                                      limits.block));
  }
  if (target.height == image->height && target.width == image->width) return image;
  // The resize widens every row first (Pillow's order), so a tall, narrow image passes through
  // height x target width pixels: a 190 KB PNG of 1x50,000,000 within the pixel limit would need a
  // 7.2 GB intermediate and a minute of CPU for its 48x13440 result. The intermediate may be no larger
  // than the largest decoded image; this bounds the resize's memory and, with it, its work.
  const int64_t passes_through = image->height * target.width;
  if (target.width != image->width && passes_through > limits.max_image_pixels) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "image %dx%d is too elongated: resizing it to %dx%d passes through %dx%d = %d pixels, over the limit of %d",
        image->width, image->height, target.width, target.height, target.width, image->height, passes_through,
        limits.max_image_pixels));
  }
  return ResizeBicubic(*image, target.height, target.width);
}

int64_t ImageSoftTokens(const RgbImage& prepared, int64_t block) {
  if (block <= 0) return 0;
  return (prepared.height / block) * (prepared.width / block);
}

}  // namespace layerpipe
