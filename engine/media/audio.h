// Audio files to the samples the audio embedder takes (docs/MULTIMODAL.md, "Audio"): a WAV file read
// with libsndfile (PCM 8/16/24/32-bit, float, double, mu-law, A-law), channels averaged to mono, integer
// PCM scaled as libsndfile does (16-bit: value/32768), resampled to 16 kHz with libsoxr (high quality)
// when the rate differs. Errors are InvalidArgument with a precise message; nothing prints or aborts.
#ifndef LAYERPIPE_ENGINE_MEDIA_AUDIO_H_
#define LAYERPIPE_ENGINE_MEDIA_AUDIO_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/media/media_limits.h"

namespace layerpipe {

inline constexpr int64_t kAudioSampleRate = 16000;
inline constexpr int64_t kAudioSamplesPerToken = 640;
inline int64_t AudioSoftTokens(int64_t samples) {
  return (samples + kAudioSamplesPerToken - 1) / kAudioSamplesPerToken;
}

// 16 kHz mono samples; refused when longer than limits.max_audio_tokens frames of 640.
absl::StatusOr<std::vector<float>> DecodeAudio(std::string_view bytes, const MediaLimits& limits);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_MEDIA_AUDIO_H_
