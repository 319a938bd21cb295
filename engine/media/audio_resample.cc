#include "engine/media/audio_resample.h"

#include <soxr.h>

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/media/audio.h"

namespace layerpipe::media_internal {

int64_t ResampledLength(int64_t frames, int rate) {
  // The length libsoxr's flush stops at (soxr.c, _soxr_flush): frames / io_ratio + 0.5, truncated, with
  // io_ratio = rate / 16000 in double. Where frames * 16000 / rate is exactly half a sample this can
  // differ from rounding that quotient: 49 frames at 8960 Hz are 87.5 samples, but 8960 / 16000 in
  // double is a hair above 0.56, so libsoxr makes 87.
  const double io_ratio = static_cast<double>(rate) / kAudioSampleRate;
  return static_cast<int64_t>(static_cast<double>(frames) / io_ratio + 0.5);
}

absl::StatusOr<std::vector<float>> ResampleTo16k(const std::vector<float>& in, int rate) {
  const size_t want = static_cast<size_t>(ResampledLength(static_cast<int64_t>(in.size()), rate));
  // Room for more than `want`: soxr_oneshot flushes only when the output buffer can take all the input
  // (ceil(olen * rate / 16000) >= in.size()); a buffer of exactly `want` leaves the filter's delay
  // unflushed and returns few or no samples. It also must not be empty (soxr 0.1.3 crashes on that).
  std::vector<float> out(static_cast<size_t>(std::ceil(static_cast<double>(in.size()) * kAudioSampleRate / rate)) + 2);
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  const soxr_runtime_spec_t runtime = soxr_runtime_spec(1);  // the caller's thread only
  size_t used = 0, made = 0;
  const soxr_error_t error = soxr_oneshot(rate, kAudioSampleRate, 1, in.data(), in.size(), &used, out.data(),
                                          out.size(), &made, &io, &quality, &runtime);
  if (error != nullptr) return absl::InvalidArgumentError(absl::StrCat("resampling from ", rate, " Hz: ", error));
  if (used != in.size() || made < want) {
    return absl::InternalError(absl::StrCat("resampling from ", rate, " Hz: libsoxr used ", used, " of ", in.size(),
                                            " samples and made ", made, " of ", want));
  }
  out.resize(want);  // what follows is the filter's tail past the end of the signal
  return out;
}

}  // namespace layerpipe::media_internal
