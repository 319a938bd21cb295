// The checks a worker makes on a StepFrame when it arrives, before queueing it: everything that does
// not depend on the sequences the stage holds (positions are checked when the step runs, because
// earlier steps may still be queued).
#ifndef LAYERPIPE_WORKER_FRAME_CHECK_H_
#define LAYERPIPE_WORKER_FRAME_CHECK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/sampling/sampler.h"
#include "proto/sampling_params.h"
#include "proto/internal.pb.h"

namespace layerpipe {

// What a frame is checked against: the model's shapes and the stage's role.
struct StageShape {
  int64_t hidden_size = 0;
  int64_t vocab_size = 0;
  int64_t max_positions = 0;
  bool first = false;
  // Image and audio inputs (zero: the model takes none of that kind).
  int64_t vision_block = 0;   // pixels per side of one image soft token
  int64_t audio_frame = 0;    // samples per audio soft token
  int32_t image_id = -1;      // the placeholder ids
  int32_t audio_id = -1;
};

// Rows (tokens) of one frame, summed over its slices. Caps the activations a single frame can make
// the worker allocate (8192 × 3840 floats = 120 MiB).
inline constexpr int64_t kMaxRowsPerFrame = 8192;
inline constexpr int kMaxTopLogprobs = 20;
// Logit values (rows × vocab) a frame's return_logits slices may ask for: 256 MiB of floats, 256 rows
// of the real vocabulary (the coordinator's limit for a whole request), which fits in a message.
inline constexpr int64_t kMaxReturnedLogits = int64_t{64} << 20;

// InvalidArgument (OutOfRange for positions past the model's limit) naming the slice and field.
// On success *rows is the frame's total token count. The hidden block is checked by DecodeHidden.
absl::Status CheckFrameContent(const internal::v1::StepFrame& frame, const StageShape& shape, int64_t* rows);

}  // namespace layerpipe

#endif  // LAYERPIPE_WORKER_FRAME_CHECK_H_
