#include "engine/media/wav_chunks.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace layerpipe::media_internal {
namespace {

uint64_t ReadUint(std::string_view b, size_t pos, int bytes, bool big_endian) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    const uint8_t byte = static_cast<uint8_t>(b[pos + (big_endian ? i : bytes - 1 - i)]);
    v = v << 8 | byte;
  }
  return v;
}

void AppendUint32(std::string* out, uint32_t v, bool big_endian) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * (big_endian ? 3 - i : i))));
}

// A chunk id for a message: bytes outside printable ASCII as '?'.
std::string ChunkName(std::string_view id) {
  std::string name;
  for (char c : id) name += (c >= 0x20 && c < 0x7f) ? c : '?';
  return name;
}

// What the canonical file's 32-bit RIFF size can describe, with room for its header.
constexpr uint64_t kMaxCanonicalBody = 0xffffff00u;

}  // namespace

bool IsWav(std::string_view b) {
  return b.size() >= 12 && (b.substr(0, 4) == "RIFF" || b.substr(0, 4) == "RIFX" || b.substr(0, 4) == "RF64") &&
         b.substr(8, 4) == "WAVE";
}

absl::StatusOr<WavChunks> FindWavChunks(std::string_view b) {
  WavChunks chunks;
  chunks.big_endian = b.substr(0, 4) == "RIFX";
  const bool rf64 = b.substr(0, 4) == "RF64";
  const bool never_closed = ReadUint(b, 4, 4, chunks.big_endian) == 8;
  bool have_fmt = false, have_data = false;
  std::optional<uint64_t> ds64_data_size;
  for (size_t pos = 12; pos + 8 <= b.size();) {
    const std::string_view id = b.substr(pos, 4);
    uint64_t size = ReadUint(b, pos + 4, 4, chunks.big_endian);
    const size_t body = pos + 8;
    const uint64_t rest = b.size() - body;
    if (id == "data") {
      if (rf64 && size == 0xffffffffu && ds64_data_size) size = *ds64_data_size;
      if (!rf64 && size == 0 && never_closed) size = rest;
      if (!have_data) chunks.data = b.substr(body, std::min(size, rest));
      have_data = true;
      if (size >= rest) break;  // the samples run to the end of the file
    } else if (size > rest) {
      return absl::InvalidArgumentError(
          absl::StrFormat("WAV file: chunk \"%s\" of %d bytes at byte %d runs past the end of the file (%d bytes)",
                          ChunkName(id), size, pos, b.size()));
    } else if (id == "fmt " && !have_fmt) {
      chunks.fmt = b.substr(body, size);
      have_fmt = true;
    } else if (rf64 && id == "ds64" && size >= 16 && !ds64_data_size) {
      ds64_data_size = ReadUint(b, body + 8, 8, false);  // after the 64-bit RIFF size
    }
    pos = body + size + (size & 1);
  }
  if (!have_fmt) return absl::InvalidArgumentError("WAV file: no \"fmt \" chunk");
  if (!have_data) return absl::InvalidArgumentError("WAV file: no \"data\" chunk");
  if (chunks.fmt.size() + chunks.data.size() > kMaxCanonicalBody) {
    return absl::InvalidArgumentError(absl::StrFormat("WAV file: %d bytes of samples, more than a WAV file holds",
                                                      chunks.data.size()));
  }
  return chunks;
}

std::string CanonicalWavHeader(const WavChunks& chunks) {
  const bool big = chunks.big_endian;
  const size_t fmt_padded = chunks.fmt.size() + (chunks.fmt.size() & 1);
  std::string head(big ? "RIFX" : "RIFF");
  AppendUint32(&head, static_cast<uint32_t>(4 + 8 + fmt_padded + 8 + chunks.data.size()), big);
  head += "WAVEfmt ";
  AppendUint32(&head, static_cast<uint32_t>(chunks.fmt.size()), big);
  head += chunks.fmt;
  head.resize(head.size() + fmt_padded - chunks.fmt.size(), '\0');
  head += "data";
  AppendUint32(&head, static_cast<uint32_t>(chunks.data.size()), big);
  return head;
}

}  // namespace layerpipe::media_internal
