// Image and audio placeholders in prompt text. `<|image|>` and `<|audio|>` stand for an attachment whatever
// the vocabulary spells (the 12B's own file has those spellings, the Gemma 3 test vocabulary others), and
// expand to the framed runs of ids the model was trained on (MODEL.md §3), inserted as ids.
#ifndef LAYERPIPE_ENGINE_TOKENIZER_SOFT_TOKEN_PROMPT_H_
#define LAYERPIPE_ENGINE_TOKENIZER_SOFT_TOKEN_PROMPT_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/config.h"
#include "engine/tokenizer/tokenizer.h"

namespace layerpipe {

inline constexpr std::string_view kImagePlaceholder = "<|image|>";
inline constexpr std::string_view kAudioPlaceholder = "<|audio|>";

// Expands the placeholders of one prompt, taking the attachments in order of kind: the k-th <|image|>
// becomes boi, image×image_tokens[k], eoi; the k-th <|audio|> boa, audio×audio_tokens[k], eoa.
class SoftTokenExpander {
 public:
  SoftTokenExpander(const MultimodalTokenIds& ids, std::vector<int64_t> image_tokens,
                    std::vector<int64_t> audio_tokens);

  // Appends the tokens of `text` (the pieces between placeholders tokenized one by one).
  void Append(const Tokenizer& tokenizer, std::string_view text, std::vector<int32_t>* out);

  // A whole plain prompt: the tokenizer's own bos handling (add_bos), then Append.
  std::vector<int32_t> EncodePrompt(const Tokenizer& tokenizer, std::string_view text, bool add_bos);

  // InvalidArgument unless every attachment took exactly one placeholder.
  absl::Status Finish() const;

 private:
  MultimodalTokenIds ids_;
  std::vector<int64_t> tokens_[2];  // images, audio clips
  int used_[2] = {0, 0};
  int wanted_[2] = {0, 0};          // placeholders seen, used or not
};

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_TOKENIZER_SOFT_TOKEN_PROMPT_H_
