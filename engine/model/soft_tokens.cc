#include "engine/model/soft_tokens.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace layerpipe {

absl::StatusOr<std::vector<SoftRun>> FindSoftRuns(absl::Span<const int32_t> ids, int32_t image_id, int32_t audio_id,
                                                  absl::Span<const int64_t> image_tokens,
                                                  absl::Span<const int64_t> audio_tokens) {
  std::vector<SoftRun> runs;
  int next[2] = {0, 0};
  const int64_t n = static_cast<int64_t>(ids.size());
  for (int64_t i = 0; i < n;) {
    const bool image = ids[i] == image_id;
    if (!image && ids[i] != audio_id) {
      ++i;
      continue;
    }
    int64_t j = i;
    while (j < n && ids[j] == ids[i]) ++j;
    const absl::Span<const int64_t> tokens = image ? image_tokens : audio_tokens;
    const char* what = image ? "image" : "audio clip";
    int& k = next[image ? 0 : 1];
    if (k >= static_cast<int>(tokens.size())) {
      return absl::InvalidArgumentError(absl::StrCat("the prompt has more runs of id ", ids[i], " than the ",
                                                     tokens.size(), " ", what, tokens.size() == 1 ? "" : "s",
                                                     " given (a run at index ", i, ")"));
    }
    if (tokens[k] != j - i) {
      return absl::InvalidArgumentError(absl::StrCat("the run of ", j - i, " ids ", ids[i], " at index ", i, " is for ",
                                                     what, " ", k + 1, ", which makes ", tokens[k], " soft tokens"));
    }
    runs.push_back({image ? SoftSpan::Kind::kImage : SoftSpan::Kind::kAudio, k, i, j - i});
    ++k;
    i = j;
  }
  if (next[0] < static_cast<int>(image_tokens.size()) || next[1] < static_cast<int>(audio_tokens.size())) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt has room for ", next[0], " of ", image_tokens.size(),
                                                   " images and ", next[1], " of ", audio_tokens.size(),
                                                   " audio clips given"));
  }
  return runs;
}

int64_t ChunkEnd(absl::Span<const SoftSpan> spans, int64_t begin, int64_t total, int64_t chunk) {
  const int64_t end = std::min(total, begin + chunk);
  for (const SoftSpan& s : spans) {
    if (s.kind != SoftSpan::Kind::kImage) continue;
    const int64_t b = s.offset, e = s.offset + s.count;
    if (b < end && e > end && e > begin) return b > begin ? b : e;
  }
  return end;
}

std::vector<SoftSpan> SpansIn(absl::Span<const SoftSpan> spans, int64_t begin, int64_t end, int64_t samples_per_token) {
  std::vector<SoftSpan> out;
  for (const SoftSpan& s : spans) {
    const int64_t b = std::max(s.offset, begin), e = std::min(s.offset + s.count, end);
    if (b >= e) continue;
    SoftSpan part = s;
    part.offset = b - begin;
    part.count = e - b;
    if (s.kind == SoftSpan::Kind::kAudio) part.samples = s.samples + (b - s.offset) * samples_per_token;
    out.push_back(part);
  }
  return out;
}

std::vector<PositionRange> ImageBlocks(absl::Span<const SoftSpan> spans, int64_t pos0) {
  std::vector<PositionRange> out;
  for (const SoftSpan& s : spans) {
    if (s.kind == SoftSpan::Kind::kImage) out.push_back({pos0 + s.offset, pos0 + s.offset + s.count});
  }
  return out;
}

}  // namespace layerpipe
