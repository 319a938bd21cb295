#include "engine/tokenizer/tokenizer.h"

namespace layerpipe {

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamingDetokenizer::Push(int32_t id) {
  std::string out;
  const Tokenizer::DecodePiece piece = tokenizer_.PieceFor(id, skip_special_tokens_);
  // A skipped special token is removed before decoding, so it does not end a byte run either.
  if (piece.skip) return out;
  if (piece.byte >= 0) {
    bytes_.Feed(static_cast<uint8_t>(piece.byte), &out);
  } else {
    bytes_.Finish(&out);
    out += piece.text;
  }
  return out;
}

std::string StreamingDetokenizer::Flush() {
  std::string out;
  bytes_.Finish(&out);
  return out;
}

}  // namespace layerpipe
