// EXIF orientation, read and applied as Pillow's ImageOps.exif_transpose does (Hugging Face opens images
// through it, so the model saw them upright).
#ifndef LAYERPIPE_ENGINE_MEDIA_EXIF_ORIENTATION_H_
#define LAYERPIPE_ENGINE_MEDIA_EXIF_ORIENTATION_H_

#include <optional>
#include <string>
#include <string_view>

#include "engine/media/image.h"

namespace layerpipe::media_internal {

// IFD0's Orientation tag of "Exif\0\0" + TIFF data (parsed with libexif), whatever its value; nullopt
// when the data has none or cannot be read.
std::optional<int> ExifOrientation(std::string_view exif);

// Pillow's fallback for PNG: the first digit matching tiff:Orientation(="|>)([0-9]) in the XMP packet.
std::optional<int> XmpOrientation(std::string_view xmp);

// ImageMagick's "Raw profile type exif" PNG text: hex after the third line, as "Exif\0\0" + TIFF.
std::optional<std::string> RawProfileExif(std::string_view text);

// Orientation 2..8 transposed upright (Pillow's Transpose methods); any other value leaves the image as is.
RgbImage ApplyOrientation(RgbImage image, int orientation);

}  // namespace layerpipe::media_internal

#endif  // LAYERPIPE_ENGINE_MEDIA_EXIF_ORIENTATION_H_
