// Wording shared by the image and audio errors, so that every limit and every unknown file reads alike.
#ifndef LAYERPIPE_ENGINE_MEDIA_MEDIA_TEXT_H_
#define LAYERPIPE_ENGINE_MEDIA_MEDIA_TEXT_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace layerpipe::media_internal {

// "40 MiB", "40.5 MiB", "1000 bytes": what a size limit message shows.
std::string FormatBytes(int64_t bytes);

// "47 49 46 38": the first (at most) four bytes in hex, to show what a refused file starts with.
std::string FirstBytes(std::string_view bytes);

// The name of a well-known format the file looks like ("GIF", "WebP", "MP3", ...), or "" when unknown.
const char* SniffFormat(std::string_view bytes);

}  // namespace layerpipe::media_internal

#endif  // LAYERPIPE_ENGINE_MEDIA_MEDIA_TEXT_H_
