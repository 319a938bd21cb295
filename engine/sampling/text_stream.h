// Token -> text -> stop check, the way every front end streams a generation (layerpipe generate and the
// coordinator's API alike): the detokenizer releases whole UTF-8 characters, and the stop checker
// (stop_conditions.h) holds back what could still become a stop string, so a client never sees half a
// character or part of a stop string. Without a tokenizer (ids-only serving) no text is produced, but
// stop ids and the token budget still apply.
#ifndef LAYERPIPE_ENGINE_SAMPLING_TEXT_STREAM_H_
#define LAYERPIPE_ENGINE_SAMPLING_TEXT_STREAM_H_

#include <cstdint>
#include <optional>
#include <string>

#include "engine/sampling/stop_conditions.h"
#include "engine/tokenizer/tokenizer.h"

namespace layerpipe {

class TextStream {
 public:
  // `tokenizer` may be null; it must outlive the stream.
  TextStream(const Tokenizer* tokenizer, StopConfig stop);

  struct Step {
    StopChecker::Reason reason = StopChecker::Reason::kNone;  // kNone: generation goes on
    std::string text;  // what may be shown now
    // When the token budget ended the run: the bytes held back so far (an unfinished character, a
    // possible stop string's start) still belong to the output, after `text`.
    std::string final_text;
  };

  // Feeds one generated id.
  Step Push(int32_t id);

 private:
  StopChecker stop_;
  std::optional<StreamingDetokenizer> detok_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_SAMPLING_TEXT_STREAM_H_
