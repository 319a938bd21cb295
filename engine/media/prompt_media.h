// The attachments of one prompt, decoded and prepared (images resized to their target size, audio at
// 16 kHz in whole frames), and how they take their places in it: placeholders in text expand through
// Expander(), runs of soft-token ids in the prompt pair with them through Spans(). Used by the CLI for a
// local engine and by the coordinator, which keeps them with the request to replay it.
#ifndef LAYERPIPE_ENGINE_MEDIA_PROMPT_MEDIA_H_
#define LAYERPIPE_ENGINE_MEDIA_PROMPT_MEDIA_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/media/image.h"
#include "engine/media/media_limits.h"
#include "engine/model/config.h"
#include "engine/model/soft_tokens.h"
#include "engine/tokenizer/soft_token_prompt.h"

namespace layerpipe {

// One attached file: its bytes and what to call it in an error ("--image cat.png", "attachments[2]").
struct MediaFile {
  SoftSpan::Kind kind = SoftSpan::Kind::kImage;
  std::string_view bytes;
  std::string name;
};

class PromptMedia {
 public:
  // Decodes every file; InvalidArgument naming the file when one cannot be, or when the model takes no
  // input of its kind. `limits` bounds sizes; its vision budget and block are taken from `config`.
  static absl::StatusOr<PromptMedia> Decode(absl::Span<const MediaFile> files, const ModelConfig& config,
                                            MediaLimits limits = {});

  bool empty() const { return images_.empty() && audios_.empty(); }
  const std::vector<RgbImage>& images() const { return images_; }
  const std::vector<std::vector<float>>& audios() const { return audios_; }
  std::vector<int64_t> image_tokens() const;
  std::vector<int64_t> audio_tokens() const;
  SoftTokenExpander Expander() const { return SoftTokenExpander(ids_, image_tokens(), audio_tokens()); }

  // The soft spans of a prompt: each run of image ids takes the next image, each run of audio ids the next
  // clip (InvalidArgument names a run whose length is not its attachment's, or an attachment left over).
  // The spans point into this object.
  absl::StatusOr<std::vector<SoftSpan>> Spans(absl::Span<const int32_t> ids) const;

 private:
  MultimodalTokenIds ids_;
  int64_t block_ = 48;
  int64_t frame_ = 640;
  std::vector<RgbImage> images_;
  std::vector<std::vector<float>> audios_;  // zero-padded to whole frames
};

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_MEDIA_PROMPT_MEDIA_H_
