// DecodeAudio: WAV through libsndfile, read from memory (sf_open_virtual), averaged to mono, then
// resampled to 16 kHz (audio_resample.h). Only WAV files reach libsndfile (checked by magic first), and
// of them only the "fmt " chunk and the samples (wav_chunks.h), in the plain encodings: its other
// parsers and codecs stay out of reach of untrusted input.
#include "engine/media/audio.h"

#include <sndfile.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/media/audio_resample.h"
#include "engine/media/media_text.h"
#include "engine/media/wav_chunks.h"

namespace layerpipe {
namespace {

// Rates libsoxr converts from sensibly; beyond them a file is more likely broken than real.
constexpr int kMinRate = 1000;
constexpr int kMaxRate = 768000;

// The canonical file (wav_chunks.h) that libsndfile reads: a header made here, then the samples where
// they lie in the caller's bytes.
struct CanonicalFile {
  std::string head;
  std::string_view data;
  sf_count_t pos = 0;

  sf_count_t size() const { return static_cast<sf_count_t>(head.size() + data.size()); }
};

sf_count_t Length(void* user) { return static_cast<CanonicalFile*>(user)->size(); }

sf_count_t Seek(sf_count_t offset, int whence, void* user) {
  auto* f = static_cast<CanonicalFile*>(user);
  sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? f->pos : f->size();
  if (offset < -base || offset > INT64_MAX - base) return -1;  // before the start, or overflowing
  f->pos = base + offset;
  return f->pos;
}

sf_count_t Read(void* out, sf_count_t count, void* user) {
  auto* f = static_cast<CanonicalFile*>(user);
  const sf_count_t head = f->head.size();
  sf_count_t done = 0;
  while (done < count && f->pos < f->size()) {
    const bool in_head = f->pos < head;
    const char* from = in_head ? f->head.data() + f->pos : f->data.data() + (f->pos - head);
    const sf_count_t n = std::min(count - done, (in_head ? head : f->size()) - f->pos);
    std::memcpy(static_cast<char*>(out) + done, from, n);
    f->pos += n;
    done += n;
  }
  return done;
}

sf_count_t Write(const void*, sf_count_t, void*) { return 0; }
sf_count_t Tell(void* user) { return static_cast<CanonicalFile*>(user)->pos; }

bool SupportedEncoding(int subtype) {
  switch (subtype) {
    case SF_FORMAT_PCM_U8: case SF_FORMAT_PCM_16: case SF_FORMAT_PCM_24: case SF_FORMAT_PCM_32:
    case SF_FORMAT_FLOAT: case SF_FORMAT_DOUBLE: case SF_FORMAT_ULAW: case SF_FORMAT_ALAW:
      return true;
    default:
      return false;
  }
}

std::string EncodingName(int subtype) {
  SF_FORMAT_INFO info{};
  info.format = subtype;
  if (sf_command(nullptr, SFC_GET_FORMAT_INFO, &info, sizeof info) == 0 && info.name) return info.name;
  return absl::StrFormat("subtype 0x%04x", subtype);
}

absl::Status TooLong(int64_t samples, const MediaLimits& limits) {
  return absl::InvalidArgumentError(absl::StrFormat("audio is %.1f s = %d tokens, over the limit of %d",
                                                    static_cast<double>(samples) / kAudioSampleRate,
                                                    AudioSoftTokens(samples), limits.max_audio_tokens));
}

}  // namespace

absl::StatusOr<std::vector<float>> DecodeAudio(std::string_view bytes, const MediaLimits& limits) {
  if (bytes.empty()) return absl::InvalidArgumentError("empty audio: the file is 0 bytes");
  if (static_cast<int64_t>(bytes.size()) > limits.max_audio_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("audio file is ", media_internal::FormatBytes(bytes.size()),
                                                   ", over the limit of ",
                                                   media_internal::FormatBytes(limits.max_audio_bytes)));
  }
  if (!media_internal::IsWav(bytes)) {
    std::string message = absl::StrCat("not a WAV file (first bytes ", media_internal::FirstBytes(bytes));
    const std::string_view format = media_internal::SniffFormat(bytes);
    if (!format.empty()) absl::StrAppend(&message, ": ", std::string(format), " is not supported");
    return absl::InvalidArgumentError(absl::StrCat(message, ")"));
  }

  absl::StatusOr<media_internal::WavChunks> chunks = media_internal::FindWavChunks(bytes);
  if (!chunks.ok()) return chunks.status();
  CanonicalFile file{media_internal::CanonicalWavHeader(*chunks), chunks->data};
  SF_VIRTUAL_IO io{Length, Seek, Read, Write, Tell};
  SF_INFO info{};
  std::unique_ptr<SNDFILE, decltype(&sf_close)> sf(sf_open_virtual(&io, SFM_READ, &info, &file), sf_close);
  // A failed open leaves its message in libsndfile's global error (sf_strerror(nullptr)).
  if (!sf) return absl::InvalidArgumentError(absl::StrCat("WAV file: ", sf_strerror(nullptr)));
  const int subtype = info.format & SF_FORMAT_SUBMASK;
  if (!SupportedEncoding(subtype)) {
    return absl::InvalidArgumentError(absl::StrCat("WAV file: unsupported encoding ", EncodingName(subtype),
                                                   " (PCM, float, mu-law and A-law are supported)"));
  }
  if (info.channels < 1) return absl::InvalidArgumentError("WAV file: no channels");
  if (info.samplerate < kMinRate || info.samplerate > kMaxRate) {
    return absl::InvalidArgumentError(absl::StrFormat("WAV file: sample rate %d Hz is outside %d..%d Hz",
                                                      info.samplerate, kMinRate, kMaxRate));
  }
  if (info.frames <= 0) return absl::InvalidArgumentError("empty audio: the WAV file has no samples");
  // Refused before reading or resampling, by the length the header gives.
  const int64_t expected = media_internal::ResampledLength(info.frames, info.samplerate);
  if (AudioSoftTokens(expected) > limits.max_audio_tokens) return TooLong(expected, limits);

  std::vector<float> mono;
  mono.reserve(static_cast<size_t>(info.frames));
  constexpr sf_count_t kFramesAtOnce = 4096;
  std::vector<double> buffer(static_cast<size_t>(kFramesAtOnce) * info.channels);
  while (static_cast<sf_count_t>(mono.size()) < info.frames) {
    const sf_count_t want = std::min(kFramesAtOnce, info.frames - static_cast<sf_count_t>(mono.size()));
    const sf_count_t got = sf_readf_double(sf.get(), buffer.data(), want);
    if (got <= 0) break;
    for (sf_count_t i = 0; i < got; ++i) {
      double sum = 0;
      for (int c = 0; c < info.channels; ++c) sum += buffer[i * info.channels + c];
      // Checked as a float: a double sample past float's range (a 64-bit float WAV) becomes infinite.
      const float v = static_cast<float>(sum / info.channels);
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(absl::StrFormat("WAV file: sample %d is not a finite float",
                                                          static_cast<int64_t>(mono.size())));
      }
      mono.push_back(v);
    }
  }
  if (sf_error(sf.get()) != SF_ERR_NO_ERROR) {
    return absl::InvalidArgumentError(absl::StrCat("WAV file: ", sf_strerror(sf.get())));
  }
  if (mono.empty()) return absl::InvalidArgumentError("empty audio: the WAV file's data ends before its first sample");

  if (info.samplerate != kAudioSampleRate) {
    absl::StatusOr<std::vector<float>> resampled = media_internal::ResampleTo16k(mono, info.samplerate);
    if (!resampled.ok()) return resampled.status();
    mono = std::move(*resampled);
    // Samples near float's limit (nothing a real file holds: full scale is 1) overflow in the filter.
    for (size_t i = 0; i < mono.size(); ++i) {
      if (!std::isfinite(mono[i])) {
        return absl::InvalidArgumentError(absl::StrFormat("WAV file: samples too large to resample (output sample %d "
                                                          "overflows)", static_cast<int64_t>(i)));
      }
    }
    if (mono.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("empty audio: %d frames at %d Hz make no sample at 16 kHz",
                                                        info.frames, info.samplerate));
    }
  }
  if (AudioSoftTokens(mono.size()) > limits.max_audio_tokens) return TooLong(mono.size(), limits);
  return mono;
}

}  // namespace layerpipe
