#include "engine/media/prompt_media.h"

#include "absl/strings/str_cat.h"
#include "engine/media/audio.h"

namespace layerpipe {

absl::StatusOr<PromptMedia> PromptMedia::Decode(absl::Span<const MediaFile> files, const ModelConfig& config,
                                                MediaLimits limits) {
  PromptMedia m;
  m.ids_ = config.mm_ids;
  // In a text-only model those ids are ordinary tokens.
  if (!config.vision.present) m.ids_.image = -1;
  if (!config.audio.present) m.ids_.audio = -1;
  m.block_ = config.vision.model_patch_size;
  m.frame_ = config.audio.samples_per_token;
  limits.max_soft_tokens = config.vision.num_soft_tokens;
  limits.block = config.vision.model_patch_size;
  for (const MediaFile& f : files) {
    auto named = [&](const absl::Status& st) {
      return absl::Status(st.code(), absl::StrCat(f.name, ": ", st.message()));
    };
    if (f.kind == SoftSpan::Kind::kImage) {
      if (!config.vision.present) return absl::InvalidArgumentError(absl::StrCat(f.name, ": this model takes no images"));
      auto image = PrepareImage(f.bytes, limits);
      if (!image.ok()) return named(image.status());
      m.images_.push_back(*std::move(image));
    } else {
      if (!config.audio.present) return absl::InvalidArgumentError(absl::StrCat(f.name, ": this model takes no audio"));
      auto samples = DecodeAudio(f.bytes, limits);
      if (!samples.ok()) return named(samples.status());
      const int64_t frames = (static_cast<int64_t>(samples->size()) + m.frame_ - 1) / m.frame_;
      samples->resize(static_cast<size_t>(frames * m.frame_), 0.0f);
      m.audios_.push_back(*std::move(samples));
    }
  }
  return m;
}

std::vector<int64_t> PromptMedia::image_tokens() const {
  std::vector<int64_t> out;
  for (const RgbImage& im : images_) out.push_back(ImageSoftTokens(im, block_));
  return out;
}

std::vector<int64_t> PromptMedia::audio_tokens() const {
  std::vector<int64_t> out;
  for (const std::vector<float>& a : audios_) out.push_back(static_cast<int64_t>(a.size()) / frame_);
  return out;
}

absl::StatusOr<std::vector<SoftSpan>> PromptMedia::Spans(absl::Span<const int32_t> ids) const {
  auto runs = FindSoftRuns(ids, ids_.image, ids_.audio, image_tokens(), audio_tokens());
  if (!runs.ok()) return runs.status();
  std::vector<SoftSpan> spans;
  for (const SoftRun& r : *runs) {
    SoftSpan s;
    s.kind = r.kind;
    s.offset = r.offset;
    s.count = r.count;
    if (r.kind == SoftSpan::Kind::kImage) {
      const RgbImage& im = images_[r.index];
      s.image = ImageView{im.height, im.width, im.rgb.data()};
    } else {
      s.samples = audios_[r.index].data();
    }
    spans.push_back(s);
  }
  return spans;
}

}  // namespace layerpipe
