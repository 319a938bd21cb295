// A WAV file's chunk table, read by the project rather than by libsndfile: libsndfile 1.2.0's parsers
// for metadata (LIST/INFO above all) loop forever on some malformed sizes (three found by
// wav_decode_fuzz, tests/fuzz/crashes/README.md), and its RF64 reader skips chunks without their pad
// byte. So DecodeAudio hands libsndfile a canonical file instead: a RIFF (or RIFX) header, the file's
// "fmt " chunk and its samples. Nothing else in the file is parsed by anyone.
#ifndef LAYERPIPE_ENGINE_MEDIA_WAV_CHUNKS_H_
#define LAYERPIPE_ENGINE_MEDIA_WAV_CHUNKS_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace layerpipe::media_internal {

// "RIFF", "RIFX" or "RF64" at 0 and "WAVE" at 8.
bool IsWav(std::string_view bytes);

struct WavChunks {
  bool big_endian = false;  // RIFX
  std::string_view fmt;     // the first "fmt " chunk's body (libsndfile ignores a second one too)
  // The samples: the first "data" chunk's body, cut at the end of the file. A second one is ignored
  // too (libsndfile 1.2.0 refused such a file; Python's wave module reads the first, as here).
  std::string_view data;
};

// Walks the top-level chunks of a file IsWav accepts. Every chunk but "data" must fit in the file, and
// there must be a "fmt " and a "data" chunk. A "data" chunk may claim more than the file holds
// (streamed recordings leave 0xffffffff there) and reads to the end, as does one of size 0 in a RIFF
// of size 8 (a recorder that never closed its file); in RF64 a data size of 0xffffffff is taken from
// the "ds64" chunk.
absl::StatusOr<WavChunks> FindWavChunks(std::string_view bytes);

// The header of the canonical file: RIFF/RIFX, WAVE, the "fmt " chunk, and the "data" chunk's
// 8 bytes; the samples (chunks.data) follow it.
std::string CanonicalWavHeader(const WavChunks& chunks);

}  // namespace layerpipe::media_internal

#endif  // LAYERPIPE_ENGINE_MEDIA_WAV_CHUNKS_H_
