#include "worker/frame_check.h"

#include <unordered_set>

#include "absl/strings/str_cat.h"

namespace layerpipe {
namespace {

absl::Status CheckSoftTokens(const internal::v1::StepSlice& s, const StageShape& shape);

absl::Status SliceError(int index, uint64_t seq_id, const absl::Status& st) {
  return absl::Status(st.code(), absl::StrCat("slice ", index, " (sequence ", seq_id, "): ", st.message()));
}

absl::Status CheckSlice(const internal::v1::StepSlice& s, const StageShape& shape) {
  if (s.ids_size() == 0) return absl::InvalidArgumentError("no token ids");
  if (s.pos0() < 0) return absl::InvalidArgumentError(absl::StrCat("pos0 ", s.pos0(), " is negative"));
  if (s.pos0() > shape.max_positions - s.ids_size()) {
    // The last position is computed unsigned: pos0 (>= 0) may be as large as INT64_MAX.
    const uint64_t last = static_cast<uint64_t>(s.pos0()) + static_cast<uint64_t>(s.ids_size() - 1);
    return absl::OutOfRangeError(absl::StrCat("positions ", s.pos0(), "..", last, " pass the model's limit of ",
                                              shape.max_positions));
  }
  for (int i = 0; i < s.ids_size(); ++i) {
    if (s.ids(i) < 0 || s.ids(i) >= shape.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", s.ids(i), " at index ", i,
                                                     " is outside the vocabulary [0, ", shape.vocab_size, ")"));
    }
  }
  if (s.has_sampling()) {
    if (auto st = ValidateSamplingParams(ToSamplingParams(s.sampling())); !st.ok()) return st;
  }
  // One draw per sampled token, so a sequence can never have used more draws than it has positions
  // (a bound that also keeps skipping cheap).
  if (s.rng_skip() < 0 || s.rng_skip() > shape.max_positions) {
    return absl::InvalidArgumentError(
        absl::StrCat("rng_skip ", s.rng_skip(), " is outside [0, ", shape.max_positions, "]"));
  }
  if (s.top_logprobs() < 0 || s.top_logprobs() > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_logprobs ", s.top_logprobs(), " is outside [0, ", kMaxTopLogprobs, "]"));
  }
  if (s.score() && (s.next_id() < -1 || s.next_id() >= shape.vocab_size)) {
    return absl::InvalidArgumentError(absl::StrCat("next_id ", s.next_id(), " is neither -1 nor in the vocabulary [0, ",
                                                   shape.vocab_size, ")"));
  }
  if (s.prefix_from() != 0 && s.pos0() == 0) {
    return absl::InvalidArgumentError("a sequence that starts from a prefix starts after it, not at pos0 0");
  }
  return CheckSoftTokens(s, shape);
}

// Image blocks: ascending, disjoint, inside the slice, over image placeholders. Soft inputs (first stage
// only): inside the slice, over their placeholders, sized as they claim; each image one of the blocks.
absl::Status CheckSoftTokens(const internal::v1::StepSlice& s, const StageShape& shape) {
  const int64_t n = s.ids_size();
  int64_t next = s.pos0();
  for (const internal::v1::PositionSpan& b : s.image_blocks()) {
    if (shape.vision_block <= 0) return absl::InvalidArgumentError("image blocks, but the model takes no images");
    if (b.begin() < next || b.end() <= b.begin() || b.end() - s.pos0() > n) {
      return absl::InvalidArgumentError(absl::StrCat("image block [", b.begin(), ", ", b.end(),
                                                     ") is not ascending inside the slice's positions [", s.pos0(),
                                                     ", ", s.pos0() + n, ")"));
    }
    for (int64_t p = b.begin(); p < b.end(); ++p) {
      if (s.ids(static_cast<int>(p - s.pos0())) != shape.image_id) {
        return absl::InvalidArgumentError(absl::StrCat("image block [", b.begin(), ", ", b.end(), ") holds id ",
                                                       s.ids(static_cast<int>(p - s.pos0())), " at position ", p));
      }
    }
    next = b.end();
  }
  if (s.soft_inputs_size() > 0 && !shape.first) {
    return absl::InvalidArgumentError("soft-token inputs go to the first stage only");
  }
  int images = 0;
  for (const internal::v1::SoftInput& in : s.soft_inputs()) {
    if (in.offset() < 0 || in.count() <= 0 || in.count() > n - in.offset()) {
      return absl::InvalidArgumentError(absl::StrCat("soft input rows [", in.offset(), ", +", in.count(),
                                                     ") lie outside the slice's ", n, " rows"));
    }
    const bool image = in.has_image();
    if (!image && !in.has_audio_samples()) return absl::InvalidArgumentError("a soft input with neither image nor audio");
    const int32_t placeholder = image ? shape.image_id : shape.audio_id;
    if ((image ? shape.vision_block : shape.audio_frame) <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("the model takes no ", image ? "images" : "audio"));
    }
    for (int64_t r = in.offset(); r < in.offset() + in.count(); ++r) {
      if (s.ids(static_cast<int>(r)) != placeholder) {
        return absl::InvalidArgumentError(absl::StrCat("soft input row ", r, " holds id ", s.ids(static_cast<int>(r)),
                                                       ", not the placeholder ", placeholder));
      }
    }
    if (image) {
      const internal::v1::PreparedImage& im = in.image();
      const int64_t b = shape.vision_block;
      if (im.height() <= 0 || im.width() <= 0 || im.height() % b != 0 || im.width() % b != 0 ||
          (im.height() / b) * (im.width() / b) != in.count()) {
        return absl::InvalidArgumentError(absl::StrCat("a ", im.width(), "x", im.height(),
                                                       " image does not make the soft input's ", in.count(),
                                                       " blocks of ", b, " pixels"));
      }
      if (static_cast<int64_t>(im.rgb().size()) != im.height() * im.width() * 3) {
        return absl::InvalidArgumentError(absl::StrCat("a ", im.width(), "x", im.height(), " image needs ",
                                                       im.height() * im.width() * 3, " RGB bytes, got ",
                                                       im.rgb().size()));
      }
      const bool is_block = images < s.image_blocks_size() &&
                            s.image_blocks(images).begin() == s.pos0() + in.offset() &&
                            s.image_blocks(images).end() == s.pos0() + in.offset() + in.count();
      if (!is_block) return absl::InvalidArgumentError("an image soft input is not the slice's next image block");
      ++images;
    } else if (static_cast<int64_t>(in.audio_samples().size()) != in.count() * shape.audio_frame * 4) {
      return absl::InvalidArgumentError(absl::StrCat(in.count(), " audio frames need ",
                                                     in.count() * shape.audio_frame * 4, " bytes of samples, got ",
                                                     in.audio_samples().size()));
    }
  }
  if (shape.first && images != s.image_blocks_size()) {
    return absl::InvalidArgumentError(absl::StrCat("the slice has ", s.image_blocks_size(), " image blocks but ", images,
                                                   " images to embed"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckFrameContent(const internal::v1::StepFrame& frame, const StageShape& shape, int64_t* rows) {
  int64_t total = 0, logits = 0;
  std::unordered_set<uint64_t> seen;
  for (int i = 0; i < frame.slices_size(); ++i) {
    const internal::v1::StepSlice& s = frame.slices(i);
    if (!seen.insert(s.seq_id()).second) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s.seq_id(), " appears in more than one slice"));
    }
    if (auto st = CheckSlice(s, shape); !st.ok()) return SliceError(i, s.seq_id(), st);
    total += s.ids_size();
    if (s.return_logits()) logits += s.ids_size() * shape.vocab_size;
  }
  if (logits > kMaxReturnedLogits) {
    return absl::InvalidArgumentError(absl::StrCat("return_logits asks for ", logits, " logit values; at most ",
                                                   kMaxReturnedLogits, " fit in one step"));
  }
  if (total > kMaxRowsPerFrame) {
    return absl::InvalidArgumentError(
        absl::StrCat("the frame carries ", total, " tokens; at most ", kMaxRowsPerFrame, " are allowed"));
  }
  if (shape.first && !frame.hidden().empty()) {
    return absl::InvalidArgumentError("the first stage embeds the ids itself; its frames must not carry hidden");
  }
  *rows = total;
  return absl::OkStatus();
}

}  // namespace layerpipe
