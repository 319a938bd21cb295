#include "engine/tokenizer/vocab.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace layerpipe {

namespace {

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return x;
}

uint64_t HashBytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * 0xD6E8FEB86659FD93ull);
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t chunk;
    std::memcpy(&chunk, s.data() + i, 8);
    h = (h ^ chunk) * 0xD6E8FEB86659FD93ull;
    h ^= h >> 32;
  }
  if (i < s.size()) {
    uint64_t chunk = 0;
    std::memcpy(&chunk, s.data() + i, s.size() - i);
    h = (h ^ chunk) * 0xD6E8FEB86659FD93ull;
  }
  return Mix(h);
}

}  // namespace

void StringIdMap::Reserve(size_t count) {
  size_t capacity = 16;
  while (capacity * 7 < count * 10) capacity *= 2;  // load factor at most 0.7
  if (capacity <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(capacity, Slot{});
  const size_t mask = capacity - 1;
  for (const Slot& s : old) {
    if (s.data == nullptr) continue;
    size_t i = s.hash & mask;
    while (slots_[i].data != nullptr) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

void StringIdMap::Grow() { Reserve(slots_.empty() ? 8 : slots_.size() * 7 / 10 + 1); }

const char* StringIdMap::Store(std::string_view key) {
  if (blocks_.empty() || block_used_ + key.size() > block_size_) {
    // Blocks double from 4 KiB to 1 MiB, uninitialized: a small map (an added-token list, a tiny
    // tokenizer) neither allocates nor clears a megabyte.
    const size_t next = blocks_.empty() ? size_t{4} << 10 : std::min(size_t{1} << 20, 2 * block_size_);
    block_size_ = std::max(next, key.size());
    blocks_.push_back(std::make_unique_for_overwrite<char[]>(block_size_));
    block_used_ = 0;
  }
  char* dest = blocks_.back().get() + block_used_;
  if (!key.empty()) std::memcpy(dest, key.data(), key.size());
  block_used_ += key.size();
  return dest;
}

std::string_view StringIdMap::Insert(std::string_view key, int32_t value) {
  if (10 * (size_ + 1) > 7 * slots_.size()) Grow();
  const uint64_t hash = HashBytes(key);
  const size_t mask = slots_.size() - 1;
  size_t i = hash & mask;
  for (; slots_[i].data != nullptr; i = (i + 1) & mask) {
    Slot& s = slots_[i];
    if (s.hash == hash && s.length == key.size() && std::memcmp(s.data, key.data(), key.size()) == 0) {
      s.value = value;
      return std::string_view(s.data, s.length);
    }
  }
  slots_[i] = Slot{hash, Store(key), static_cast<uint32_t>(key.size()), value};
  ++size_;
  return std::string_view(slots_[i].data, slots_[i].length);
}

std::optional<int32_t> StringIdMap::Find(std::string_view key) const {
  if (slots_.empty()) return std::nullopt;
  const uint64_t hash = HashBytes(key);
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask; slots_[i].data != nullptr; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.hash == hash && s.length == key.size() && std::memcmp(s.data, key.data(), key.size()) == 0) {
      return s.value;
    }
  }
  return std::nullopt;
}

absl::StatusOr<Vocab> Vocab::Build(const std::vector<std::pair<std::string, int64_t>>& model_vocab,
                                   const std::vector<AddedToken>& added, const std::string& source) {
  int64_t max_id = -1;
  const std::string* max_token = nullptr;
  const char* max_where = "";
  for (const auto& [token, id] : model_vocab) {
    if (id < 0 || id >= std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer file '", source, "': model.vocab entry '", token, "' has an invalid id ", id));
    }
    if (id > max_id) {
      max_id = id;
      max_token = &token;
      max_where = "model.vocab";
    }
  }
  for (const AddedToken& t : added) {
    if (t.id > max_id) {
      max_id = t.id;
      max_token = &t.content;
      max_where = "added_tokens";
    }
  }
  // The id -> token table has max_id + 1 entries, so ids far beyond the number of tokens would make a
  // small file allocate gigabytes (one id of 2^31 - 2: 32 GiB). Real vocabularies are dense; allow
  // kMaxIdGap ids without a token beyond the count of entries.
  const int64_t entries = static_cast<int64_t>(model_vocab.size() + added.size());
  if (max_id >= entries + kMaxIdGap) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer file '", source, "': ", max_where, " entry '", *max_token, "' has id ", max_id,
        ", which leaves more than ", kMaxIdGap, " ids without a token (the file has ", entries, " tokens)"));
  }

  Vocab v;
  v.id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string_view());
  v.token_to_id_.Reserve(model_vocab.size() + added.size());
  auto set = [&v](std::string_view token, int32_t id) {
    // The arena pointer is non-null even for an empty token, so HasToken still sees it.
    v.id_to_token_[id] = v.token_to_id_.Insert(token, id);
  };
  for (const auto& [token, id] : model_vocab) set(token, static_cast<int32_t>(id));
  for (const AddedToken& t : added) set(t.content, t.id);
  return v;
}

std::optional<int32_t> Vocab::Find(std::string_view token) const { return token_to_id_.Find(token); }

std::string_view Vocab::Token(int32_t id) const {
  if (!HasToken(id)) return {};
  return id_to_token_[id];
}

AddedTokenTrie::AddedTokenTrie() {
  nodes_.emplace_back();
  std::fill(std::begin(root_children_), std::end(root_children_), -1);
}

int32_t AddedTokenTrie::Child(int32_t node, uint8_t byte) const {
  if (node == 0) return root_children_[byte];
  const auto& children = nodes_[node].children;
  auto it = std::lower_bound(children.begin(), children.end(), byte,
                             [](const std::pair<uint8_t, int32_t>& c, uint8_t b) { return c.first < b; });
  return (it != children.end() && it->first == byte) ? it->second : -1;
}

void AddedTokenTrie::Insert(std::string_view content, int32_t value) {
  if (content.empty()) return;  // an empty token can never be matched by the reference splitter
  int32_t node = 0;
  for (char c : content) {
    const auto byte = static_cast<uint8_t>(c);
    int32_t next = Child(node, byte);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      if (node == 0) {
        root_children_[byte] = next;
      } else {
        auto& children = nodes_[node].children;
        auto it = std::lower_bound(children.begin(), children.end(), byte,
                                   [](const std::pair<uint8_t, int32_t>& c, uint8_t b) { return c.first < b; });
        children.insert(it, {byte, next});
      }
    }
    node = next;
  }
  nodes_[node].value = value;  // a later duplicate wins, as with the reference's trie
  empty_ = false;
}

std::optional<std::pair<int32_t, size_t>> AddedTokenTrie::LongestMatchAt(std::string_view text, size_t pos) const {
  std::optional<std::pair<int32_t, size_t>> best;
  int32_t node = 0;
  for (size_t j = pos; j < text.size(); ++j) {
    node = Child(node, static_cast<uint8_t>(text[j]));
    if (node < 0) break;
    if (nodes_[node].value >= 0) best = std::make_pair(nodes_[node].value, j + 1 - pos);
  }
  return best;
}

}  // namespace layerpipe
