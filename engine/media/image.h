// Image files to the pixels the vision embedder takes (docs/MULTIMODAL.md, "Image preprocessing"):
// decode PNG or JPEG, apply the EXIF orientation, convert to RGB as Pillow's convert("RGB") does, and
// resize to the vision budget's size with Pillow's antialiased bicubic. Hugging Face's processor opens
// images with Pillow, so decoded pixels equal Pillow's and the resize follows Pillow's fixed-point path.
// Every error is InvalidArgument with a message naming what was wrong; nothing prints or aborts.
#ifndef LAYERPIPE_ENGINE_MEDIA_IMAGE_H_
#define LAYERPIPE_ENGINE_MEDIA_IMAGE_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/media/media_limits.h"

namespace layerpipe {

struct RgbImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // [height][width][3], row-major
};

// PNG or JPEG. EXIF orientation applied (JPEG APP1; PNG eXIf, and like Pillow a PNG's "Raw profile type
// exif" text or XMP tiff:Orientation). Alpha is dropped, not composited; gray and palette are expanded;
// 16-bit samples keep their high byte. CMYK JPEGs are converted as Pillow does (Adobe-inverted).
absl::StatusOr<RgbImage> DecodeImage(std::string_view bytes, const MediaLimits& limits);

struct ImageSize {
  int64_t height = 0, width = 0;
};

// MULTIMODAL.md "Target size": the largest multiples of `block` within max_soft_tokens*block*block pixels
// at the image's aspect ratio; a side that rounds to 0 becomes `block` and the other
// min(floor(long/short), max_soft_tokens) blocks. {0, 0} for non-positive arguments.
ImageSize VisionTargetSize(int64_t height, int64_t width, int64_t max_soft_tokens = 280, int64_t block = 48);

// Pillow's Image.resize((width, height), Image.BICUBIC) of an RGB image, bit for bit: antialiased (the
// filter widens with the downscale factor), a = -0.5, horizontal pass then vertical, 8-bit rounding and
// clamping between them. An empty image for non-positive sizes; a copy when the size is unchanged.
RgbImage ResizeBicubic(const RgbImage& in, int64_t height, int64_t width);

// DecodeImage, then resized to VisionTargetSize (not resized when already at that size).
absl::StatusOr<RgbImage> PrepareImage(std::string_view bytes, const MediaLimits& limits);

// The soft tokens a prepared image becomes: (height/block)*(width/block).
int64_t ImageSoftTokens(const RgbImage& prepared, int64_t block = 48);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_MEDIA_IMAGE_H_
