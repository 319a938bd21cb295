#include "engine/sampling/text_stream.h"

#include <utility>

namespace layerpipe {

TextStream::TextStream(const Tokenizer* tokenizer, StopConfig stop) : stop_(std::move(stop)) {
  if (tokenizer != nullptr) detok_.emplace(*tokenizer);
}

TextStream::Step TextStream::Push(int32_t id) {
  Step step;
  const std::string piece = detok_ ? detok_->Push(id) : std::string();
  step.reason = stop_.Push(id, piece);
  step.text = stop_.TakeEmittable();
  if (step.reason == StopChecker::Reason::kMaxTokens) {
    step.final_text = stop_.Flush() + (detok_ ? detok_->Flush() : std::string());
  }
  return step;
}

}  // namespace layerpipe
