// Byte-pair-encoding model of a tokenizer.json ("model": {"type": "BPE"}), matching the reference encoder:
// a word is split into code points, the lowest-ranked adjacent pair is merged first (leftmost on ties)
// until no ranked pair remains, and every resulting piece that is not a token falls back to its UTF-8
// bytes as <0xHH> tokens (or to the unknown token).
#ifndef LAYERPIPE_ENGINE_TOKENIZER_BPE_H_
#define LAYERPIPE_ENGINE_TOKENIZER_BPE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/vocab.h"
#include "nlohmann/json_fwd.hpp"

namespace layerpipe {

class BpeModel {
 public:
  // `model` is the tokenizer.json "model" object (its settings; vocab and merges come separately), `merges`
  // its merge list in rank order, `unk_id` the unknown token's id in the model vocabulary (the reference
  // resolves it before added tokens are overlaid). `vocab` is the final token table, which decides what
  // counts as a token after merging; it must outlive the model.
  static absl::StatusOr<BpeModel> Build(const nlohmann::json& model,
                                        const std::vector<std::pair<std::string, std::string>>& merges,
                                        std::optional<int32_t> unk_id, const Vocab& vocab, const std::string& source);

  // Appends the ids of one pre-tokenized word (valid UTF-8).
  void EncodeWord(std::string_view word, std::vector<int32_t>* ids) const;

  bool fuse_unk() const { return fuse_unk_; }
  std::optional<int32_t> unk_id() const { return unk_id_; }
  const std::string& unk_token() const { return unk_token_; }

 private:
  // Merge table keyed by the two symbol ids; open addressing because it is probed once per candidate pair.
  struct MergeSlot {
    uint64_t key;
    int32_t rank;
    int32_t result;
  };
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};

  int32_t Intern(std::string_view s);
  int32_t SymbolOf(std::string_view s) const;
  void InsertMerge(int32_t left, int32_t right, int32_t rank, int32_t result);
  const MergeSlot* FindMerge(int32_t left, int32_t right) const;
  // Appends the ids for one final piece `text` whose symbol is `symbol` (-1: not interned).
  void EmitPiece(int32_t symbol, std::string_view text, std::vector<int32_t>* ids) const;

  const Vocab* vocab_ = nullptr;
  // Symbols are strings that take part in merges. A string that is a token uses its token id as symbol id;
  // other strings get ids from vocab size upward.
  StringIdMap extra_symbols_;
  // The symbol of each BMP code point's one-character string, or -1, up to the last code point that has
  // one (the others below 0x10000 have none).
  std::vector<int32_t> bmp_symbol_;
  std::vector<MergeSlot> merges_;
  uint64_t merge_mask_ = 0;
  int32_t byte_token_[256];
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;  // a word that is itself a token is emitted without merging
  std::optional<int32_t> unk_id_;
  std::string unk_token_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_TOKENIZER_BPE_H_
