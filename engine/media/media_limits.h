// What an image or audio file may cost before it is refused (docs/MULTIMODAL.md): file sizes, the decoded
// pixel count (checked from the header, before any pixel is decoded), the audio length, and the vision
// budget that sets the prepared image's size.
#ifndef LAYERPIPE_ENGINE_MEDIA_MEDIA_LIMITS_H_
#define LAYERPIPE_ENGINE_MEDIA_MEDIA_LIMITS_H_

#include <cstdint>

namespace layerpipe {

struct MediaLimits {
  int64_t max_image_bytes = 32 << 20;     // encoded file size
  int64_t max_image_pixels = 50'000'000;  // decoded width*height (decompression-bomb guard)
  int64_t max_audio_bytes = 64 << 20;
  int64_t max_audio_tokens = 750;  // 640-sample frames at 16 kHz (30 s)
  int64_t max_soft_tokens = 280;   // vision token budget (vision_config.num_soft_tokens)
  int64_t block = 48;              // vision_config.model_patch_size
};

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_MEDIA_MEDIA_LIMITS_H_
