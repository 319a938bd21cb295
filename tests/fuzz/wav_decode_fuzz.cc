// libFuzzer target: DecodeAudio on arbitrary bytes with the default limits, i.e. engine/media's walk of
// the chunk table, libsndfile's WAV reader on the canonical file made from it, the mono mix and
// libsoxr's resampling. Seeds: corpus/wav_decode_fuzz (make_corpus.py).
//
// Checked: an error is InvalidArgument with a message; a success is a non-empty run of finite samples
// within the 750-token limit.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "engine/media/audio.h"

namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "wav_decode_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const layerpipe::MediaLimits limits;
  auto samples = layerpipe::DecodeAudio(bytes, limits);
  if (!samples.ok()) {
    Check(samples.status().code() == absl::StatusCode::kInvalidArgument, "an error that is not InvalidArgument");
    Check(!samples.status().message().empty(), "an error without a message");
    return 0;
  }
  Check(!samples->empty(), "no samples without an error");
  Check(layerpipe::AudioSoftTokens(static_cast<int64_t>(samples->size())) <= limits.max_audio_tokens,
        "over the token limit");
  for (float v : *samples) Check(std::isfinite(v), "a sample that is not finite");
  return 0;
}
