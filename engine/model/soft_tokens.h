// Soft tokens: rows of a prompt whose embedding comes from an image or an audio clip instead of the
// token table (MULTIMODAL.md, "Into the text stack"), and the image blocks the sliding layers' mask
// opens up. What the stage that embeds takes, and what every stage's attention must know.
#ifndef LAYERPIPE_ENGINE_MODEL_SOFT_TOKENS_H_
#define LAYERPIPE_ENGINE_MODEL_SOFT_TOKENS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace layerpipe {

// A prepared image (decoded, RGB, resized to its target size): uint8 [height][width][3], both sides
// multiples of the vision block (vision_config.model_patch_size).
struct ImageView {
  int64_t height = 0;
  int64_t width = 0;
  const uint8_t* rgb = nullptr;
};

// `count` rows starting `offset` rows into a slice (or a prompt) that take soft tokens: all of one
// image's (an image is never split), or some consecutive frames of an audio clip.
struct SoftSpan {
  enum class Kind { kImage, kAudio };
  Kind kind = Kind::kImage;
  int64_t offset = 0;
  int64_t count = 0;
  ImageView image;                // kImage
  const float* samples = nullptr;  // kAudio: count frames of samples_per_token 16 kHz samples
};

// Positions [begin, end) of one image's soft tokens: on sliding layers they see each other both ways.
struct PositionRange {
  int64_t begin = 0;
  int64_t end = 0;
};

// A maximal run of one soft-token id in a prompt and the attachment it takes (the index-th image, or
// the index-th audio clip).
struct SoftRun {
  SoftSpan::Kind kind = SoftSpan::Kind::kImage;
  int index = 0;
  int64_t offset = 0;
  int64_t count = 0;
};

// Pairs each maximal run of `image_id` in `ids` with the next image and each run of `audio_id` with the
// next audio clip, in order. InvalidArgument when a run's length is not its attachment's soft-token count
// (naming both), or when there are more runs than attachments of that kind, or fewer.
absl::StatusOr<std::vector<SoftRun>> FindSoftRuns(absl::Span<const int32_t> ids, int32_t image_id, int32_t audio_id,
                                                  absl::Span<const int64_t> image_tokens,
                                                  absl::Span<const int64_t> audio_tokens);

// Where a prefill chunk of at most `chunk` rows starting at row `begin` of `total` ends so that it cuts no
// image (spans ascending, offsets relative to the same rows): early, just before an image it would cut;
// or, when an image starts at `begin` and is longer than `chunk`, after that whole image.
int64_t ChunkEnd(absl::Span<const SoftSpan> spans, int64_t begin, int64_t total, int64_t chunk);

// The spans of rows [begin, end), offsets made relative to `begin`: images whole (the range must not cut
// one), audio trimmed to the frames inside (samples advanced to match).
std::vector<SoftSpan> SpansIn(absl::Span<const SoftSpan> spans, int64_t begin, int64_t end, int64_t samples_per_token);

// The image blocks of `spans` as absolute positions, for rows whose first one sits at position `pos0`.
std::vector<PositionRange> ImageBlocks(absl::Span<const SoftSpan> spans, int64_t pos0);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_MODEL_SOFT_TOKENS_H_
