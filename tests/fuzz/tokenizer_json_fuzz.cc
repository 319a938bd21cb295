// libFuzzer target: the tokenizer.json loader (Tokenizer::FromJsonText), and Encode/Decode on whatever
// it accepts. The input is the JSON text, optionally followed by a NUL byte and a text to encode (raw NUL
// is never valid JSON, so the two parts cannot be confused).
//
// Checked on every accepted tokenizer: encoding some fixed texts and the given one gives ids in
// [0, vocab_size), and decoding them does not crash; ids out of range decode without crashing; StreamingDetokenizer's pushes plus its flush
// equal Decode of the same ids (tokenizer.h promises it).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace {

void Check(bool ok, const char* what, std::string_view detail = {}) {
  if (ok) return;
  std::fprintf(stderr, "tokenizer_json_fuzz: %s %.*s\n", what, static_cast<int>(detail.size()), detail.data());
  std::abort();
}

void RoundTrip(const layerpipe::Tokenizer& tok, const std::vector<int32_t>& ids) {
  for (bool skip : {true, false}) {
    const std::string decoded = tok.Decode(ids, skip);
    layerpipe::StreamingDetokenizer stream(tok, skip);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.Push(id);
    streamed += stream.Flush();
    Check(streamed == decoded, "streamed text differs from Decode:", decoded);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view json = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);

  auto loaded = layerpipe::Tokenizer::FromJsonText(json, "fuzz/tokenizer.json");
  if (!loaded.ok()) {
    Check(!loaded.status().message().empty(), "an error without a message");
    return 0;
  }
  const layerpipe::Tokenizer& tok = **loaded;
  const int vocab = tok.vocab_size();
  Check(vocab >= 0, "negative vocab_size");

  static const char* const kTexts[] = {"", "Hello, world!", " a  b\n\nc ", "<s><bos>x</s>",
                                       "\xE2\x82\xAC \xF0\x9F\x98\x80 \xFF\xFE \xC3", "\xE2\x96\x81\xE2\x96\x81"};
  for (const char* t : kTexts) {
    for (bool bos : {false, true}) {
      const std::vector<int32_t> ids = tok.Encode(t, bos);
      for (int32_t id : ids) Check(id >= 0 && id < vocab, "Encode gave an id outside the vocabulary");
      RoundTrip(tok, ids);
    }
  }
  if (!text.empty()) {
    const std::vector<int32_t> ids = tok.Encode(text, /*add_bos=*/true);
    for (int32_t id : ids) Check(id >= 0 && id < vocab, "Encode gave an id outside the vocabulary");
    RoundTrip(tok, ids);
  }

  // Every id of a small vocabulary (the first ones of a large one), and ids without a token.
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab && id < 300; ++id) {
    ids.push_back(id);
    const std::string_view token = tok.IdToToken(id);
    if (!token.empty() && tok.TokenToId(token).has_value()) (void)tok.IdToToken(*tok.TokenToId(token));
    (void)tok.IsSpecial(id);
  }
  const auto past = static_cast<int32_t>(std::min<int64_t>(int64_t{vocab} + 1, INT32_MAX));
  ids.insert(ids.end(), {-1, vocab, past, INT32_MAX, INT32_MIN});
  (void)tok.IsSpecial(-1);
  (void)tok.IsSpecial(vocab);
  RoundTrip(tok, ids);
  return 0;
}
