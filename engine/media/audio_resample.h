// Resampling to the 16 kHz the audio embedder takes, with libsoxr.
#ifndef LAYERPIPE_ENGINE_MEDIA_AUDIO_RESAMPLE_H_
#define LAYERPIPE_ENGINE_MEDIA_AUDIO_RESAMPLE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace layerpipe::media_internal {

// How many 16 kHz samples `frames` at `rate` become: frames * 16000 / rate, rounded as libsoxr rounds it
// (which may differ by one where that quotient is exactly half a sample).
int64_t ResampledLength(int64_t frames, int rate);

// libsoxr's high-quality (SOXR_HQ) one-shot conversion of mono samples from `rate` to 16 kHz, flushed,
// ResampledLength(in.size(), rate) samples long (possibly none, for a few samples at a high rate).
absl::StatusOr<std::vector<float>> ResampleTo16k(const std::vector<float>& in, int rate);

}  // namespace layerpipe::media_internal

#endif  // LAYERPIPE_ENGINE_MEDIA_AUDIO_RESAMPLE_H_
