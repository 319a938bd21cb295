// Hugging Face tokenizer.json tokenizer (BPE model), bit-exact with the reference JavaScript encoder used by
// the tests (@lenml/tokenizers, a transformers.js port): same ids from Encode, same text from Decode.
//
// Encoding: invalid UTF-8 becomes U+FFFD; added tokens (special or not) are split out of the raw text first,
// longest match at the leftmost position; the text between them is normalized, pre-tokenized and run through
// BPE; the post-processor template (e.g. <bos>) is applied when add_bos is set.
//
// Flags of added tokens: lstrip/rstrip trim whitespace next to the token, as the reference does.
// single_word and normalized are ignored by the reference; this tokenizer follows Hugging Face for them
// (single_word: not matched next to a word character; normalized: matched in the normalized text). The
// Gemma vocabulary sets neither.
//
// Only tokenizer.json is read (not tokenizer_config.json): Decode never applies clean_up_tokenization_spaces,
// which Gemma's config turns off. A loaded Tokenizer is immutable; Encode and Decode may run concurrently.
#ifndef LAYERPIPE_ENGINE_TOKENIZER_TOKENIZER_H_
#define LAYERPIPE_ENGINE_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/pipeline.h"
#include "engine/tokenizer/utf8.h"
#include "engine/tokenizer/vocab.h"

namespace layerpipe {

class Tokenizer {
 public:
  // Errors name the file: NotFound (missing/unreadable), InvalidArgument (not JSON or malformed),
  // Unimplemented (a model/normalizer/pre-tokenizer/decoder/post-processor type this class does not handle).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& tokenizer_json_path);
  // Same, from JSON text in memory; `source` names it in errors.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJsonText(std::string_view json_text,
                                                                 const std::string& source);

  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  std::vector<int32_t> Encode(std::string_view text, bool add_bos) const;
  // Ids without a token (out of range, or gaps) decode as the unknown token. Empty ids give "".
  std::string Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const;

  // One past the largest id with a token (262145 for the npm Gemma file: <image_soft_token> is id 262144).
  int vocab_size() const { return vocab_.size(); }
  std::optional<int32_t> TokenToId(std::string_view token) const { return vocab_.Find(token); }
  // The token's spelling; empty for ids without a token.
  std::string_view IdToToken(int32_t id) const { return vocab_.Token(id); }
  // True for added tokens marked special (<bos>, <eos>, <start_of_turn>, ...).
  bool IsSpecial(int32_t id) const;

 private:
  friend class StreamingDetokenizer;
  Tokenizer() = default;
  absl::Status Init(const std::string& source, std::string_view json_text);

  struct Section {
    std::string_view text;
    std::optional<int32_t> added_id;  // set when the section is an added token
  };
  // Splits on the added tokens of `trie`, applies lstrip/rstrip, and resolves whole-token sections via
  // `by_content` (as the reference looks sections up by their text).
  void SplitOnAddedTokens(std::string_view text, const AddedTokenTrie& trie,
                          const std::unordered_map<std::string_view, int32_t>& by_content,
                          std::vector<Section>* sections) const;
  // Normalizes, pre-tokenizes and BPE-encodes text that holds no raw-text added token.
  void EncodePlain(std::string_view text, std::vector<int32_t>* ids) const;

  // What decoding contributes for one id: skipped entirely, one raw byte of a byte-fallback run, or text.
  struct DecodePiece {
    bool skip = false;
    int byte = -1;
    std::string text;
  };
  DecodePiece PieceFor(int32_t id, bool skip_special_tokens) const;

  Vocab vocab_;
  std::vector<AddedToken> added_;
  // Added tokens by content: index into added_. Raw-text ones split the input before normalization;
  // normalized ones (keyed by their normalized content) split each normalized section.
  std::unordered_map<std::string_view, int32_t> raw_added_index_;
  std::unordered_map<std::string_view, int32_t> normalized_added_index_;
  std::vector<std::string> normalized_contents_;
  AddedTokenTrie raw_trie_;
  AddedTokenTrie normalized_trie_;
  std::vector<bool> special_;          // per id: an added token marked special sits at this id
  std::vector<bool> skip_on_decode_;   // per id: its spelling is that of a special token
  bool unk_skipped_on_decode_ = false;  // the same for ids that decode as the unknown token
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  std::optional<BpeModel> bpe_;
  TokenDecoder decoder_;
  std::vector<int32_t> prefix_ids_;  // post-processor template around the sequence, when add_bos
  std::vector<int32_t> suffix_ids_;
};

// Incremental detokenizer for generation. Push returns the text completed by one more id; a character whose
// UTF-8 bytes arrive as several byte-fallback tokens (<0xE2><0x82><0xAC>) is held back until it is whole.
// Flush ends the stream (an unfinished character becomes U+FFFD) and resets for a new one. The concatenation
// of every Push and the final Flush equals Decode of all the ids.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = true);

  std::string Push(int32_t id);
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  // A byte-fallback run is decoded like one TextDecoder call: a leading BOM is dropped.
  Utf8StreamDecoder bytes_{/*strip_leading_bom=*/true};
};

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_TOKENIZER_TOKENIZER_H_
