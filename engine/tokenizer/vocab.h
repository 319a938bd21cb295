// Token <-> id tables of a Hugging Face tokenizer.json, and the trie that finds added tokens in text.
#ifndef LAYERPIPE_ENGINE_TOKENIZER_VOCAB_H_
#define LAYERPIPE_ENGINE_TOKENIZER_VOCAB_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace layerpipe {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// String -> int32 map for vocabulary-sized tables (hundreds of thousands of short keys). Keys are copied into
// an arena whose blocks never move, so views returned by Insert stay valid for the map's lifetime. Open
// addressing keeps a lookup to about one cache miss, which matters when loading half a million merges.
class StringIdMap {
 public:
  StringIdMap() = default;
  StringIdMap(StringIdMap&&) = default;
  StringIdMap& operator=(StringIdMap&&) = default;

  void Reserve(size_t count);
  // Sets key -> value (overwriting) and returns the stored copy of the key.
  std::string_view Insert(std::string_view key, int32_t value);
  std::optional<int32_t> Find(std::string_view key) const;
  size_t size() const { return size_; }
  // Calls f(key, value) for every entry, in no particular order.
  template <typename F>
  void ForEach(F&& f) const {
    for (const Slot& s : slots_) {
      if (s.data != nullptr) f(std::string_view(s.data, s.length), s.value);
    }
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    const char* data = nullptr;  // nullptr: empty slot
    uint32_t length = 0;
    int32_t value = 0;
  };
  const char* Store(std::string_view key);
  void Grow();

  std::vector<Slot> slots_;
  size_t size_ = 0;
  std::vector<std::unique_ptr<char[]>> blocks_;
  size_t block_used_ = 0;
  size_t block_size_ = 0;
};

// The model vocabulary overlaid with the added tokens: an added token takes over its id and its spelling,
// as in the reference, where added tokens are written into the model's maps after the model is built.
class Vocab {
 public:
  // Ids without a token a vocabulary may have (below its largest id): Build refuses sparser ones, whose
  // id table would be out of proportion to the file (InvalidArgument naming the entry).
  static constexpr int64_t kMaxIdGap = int64_t{1} << 20;

  // `model_vocab` holds the model section's "vocab" entries; `source` names the file in errors.
  static absl::StatusOr<Vocab> Build(const std::vector<std::pair<std::string, int64_t>>& model_vocab,
                                     const std::vector<AddedToken>& added, const std::string& source);

  // One past the largest id that has a token.
  int32_t size() const { return static_cast<int32_t>(id_to_token_.size()); }
  std::optional<int32_t> Find(std::string_view token) const;
  // Calls f(token, id) for every token Find knows, in no particular order.
  template <typename F>
  void ForEachToken(F&& f) const {
    token_to_id_.ForEach(f);
  }
  // Empty for ids without a token.
  std::string_view Token(int32_t id) const;
  bool HasToken(int32_t id) const { return id >= 0 && id < size() && id_to_token_[id].data() != nullptr; }

 private:
  StringIdMap token_to_id_;
  std::vector<std::string_view> id_to_token_;  // views into token_to_id_'s arena
};

// Byte trie over added-token contents; finds the longest token starting at a position, the way the
// reference's DictionarySplitter scans text left to right.
class AddedTokenTrie {
 public:
  AddedTokenTrie();
  void Insert(std::string_view content, int32_t value);
  bool empty() const { return empty_; }
  // Longest inserted content that starts at text[pos]: its value and byte length, or nullopt.
  std::optional<std::pair<int32_t, size_t>> LongestMatchAt(std::string_view text, size_t pos) const;

 private:
  struct Node {
    int32_t value = -1;
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
  };
  int32_t Child(int32_t node, uint8_t byte) const;

  std::vector<Node> nodes_;
  int32_t root_children_[256];
  bool empty_ = true;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_TOKENIZER_VOCAB_H_
