#include "engine/tokenizer/bpe.h"

#include <algorithm>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/tokenizer/utf8.h"
#include "nlohmann/json.hpp"

namespace layerpipe {
namespace {

absl::Status Unsupported(const std::string& source, const std::string& what) {
  return absl::UnimplementedError(absl::StrCat("tokenizer file '", source, "': unsupported ", what));
}

inline uint64_t MergeKey(int32_t left, int32_t right) {
  return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
}

inline uint64_t MixKey(uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return x;
}

// The code point `s` is the UTF-8 spelling of, if it spells exactly one outside the surrogates and
// below 0x10000.
std::optional<char32_t> SingleBmpCodePoint(std::string_view s) {
  if (s.empty() || s.size() > 3) return std::nullopt;
  size_t pos = 0;
  const char32_t cp = NextCodePoint(s, &pos);
  if (pos != s.size() || cp >= 0x10000 || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
  std::string spelled;
  AppendUtf8(cp, &spelled);  // refuses what NextCodePoint replaced (invalid or overlong bytes)
  if (spelled != s) return std::nullopt;
  return cp;
}

bool OptionalBool(const nlohmann::json& model, const char* name) {
  return model.contains(name) && model[name].is_boolean() && model[name].get<bool>();
}

}  // namespace

int32_t BpeModel::SymbolOf(std::string_view s) const {
  if (std::optional<int32_t> id = vocab_->Find(s)) return *id;
  return extra_symbols_.Find(s).value_or(-1);
}

int32_t BpeModel::Intern(std::string_view s) {
  if (int32_t sym = SymbolOf(s); sym >= 0) return sym;
  const int32_t sym = vocab_->size() + static_cast<int32_t>(extra_symbols_.size());
  extra_symbols_.Insert(s, sym);
  return sym;
}

void BpeModel::InsertMerge(int32_t left, int32_t right, int32_t rank, int32_t result) {
  const uint64_t key = MergeKey(left, right);
  for (uint64_t i = MixKey(key) & merge_mask_;; i = (i + 1) & merge_mask_) {
    MergeSlot& slot = merges_[i];
    if (slot.key == kEmptyKey || slot.key == key) {
      // A repeated pair keeps its last rank, as the reference's rank map does.
      slot = {key, rank, result};
      return;
    }
  }
}

const BpeModel::MergeSlot* BpeModel::FindMerge(int32_t left, int32_t right) const {
  const uint64_t key = MergeKey(left, right);
  for (uint64_t i = MixKey(key) & merge_mask_;; i = (i + 1) & merge_mask_) {
    const MergeSlot& slot = merges_[i];
    if (slot.key == key) return &slot;
    if (slot.key == kEmptyKey) return nullptr;
  }
}

absl::StatusOr<BpeModel> BpeModel::Build(const nlohmann::json& model,
                                         const std::vector<std::pair<std::string, std::string>>& merges,
                                         std::optional<int32_t> unk_id, const Vocab& vocab, const std::string& source) {
  BpeModel m;
  m.vocab_ = &vocab;
  if (!model.is_object() || !model.contains("type") || !model["type"].is_string() ||
      model["type"].get<std::string>() != "BPE") {
    return Unsupported(source, "model (only type \"BPE\" is implemented)");
  }
  if (model.contains("dropout") && model["dropout"].is_number() && model["dropout"].get<double>() > 0.0) {
    return Unsupported(source, "BPE dropout");
  }
  for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(field) && !model[field].is_null() &&
        !(model[field].is_string() && model[field].get<std::string>().empty())) {
      return Unsupported(source, absl::StrCat("BPE ", field));
    }
  }
  m.byte_fallback_ = OptionalBool(model, "byte_fallback");
  m.fuse_unk_ = OptionalBool(model, "fuse_unk");
  m.ignore_merges_ = OptionalBool(model, "ignore_merges");
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    m.unk_token_ = model["unk_token"].get<std::string>();
    m.unk_id_ = unk_id;
  }
  for (int b = 0; b < 256; ++b) {
    std::optional<int32_t> id = vocab.Find(absl::StrFormat("<0x%02X>", b));
    m.byte_token_[b] = id ? *id : -1;
  }

  size_t capacity = 16;
  while (capacity < 2 * merges.size()) capacity *= 2;
  m.merges_.assign(capacity, MergeSlot{kEmptyKey, 0, 0});
  m.merge_mask_ = capacity - 1;
  std::string joined;
  int32_t rank = 0;
  for (const auto& [left, right] : merges) {
    joined.assign(left);
    joined.append(right);
    const int32_t l = m.Intern(left);
    const int32_t r = m.Intern(right);
    m.InsertMerge(l, r, rank, m.Intern(joined));
    ++rank;
  }

  // Only a key of the vocabulary or of the extra symbols has a symbol, so the table is filled from their
  // keys that spell one BMP code point, with what SymbolOf gives for that spelling, and ends after the
  // last such code point: the same lookups as a table of all 63,488 code points, at a cost that follows
  // the file (a tiny tokenizer, as the fuzzer writes them, builds ~2x faster).
  std::vector<std::pair<char32_t, int32_t>> singles;
  auto note = [&m, &singles](std::string_view key, int32_t) {
    if (const std::optional<char32_t> cp = SingleBmpCodePoint(key)) singles.emplace_back(*cp, m.SymbolOf(key));
  };
  vocab.ForEachToken(note);
  m.extra_symbols_.ForEach(note);
  char32_t end = 0;
  for (const auto& [cp, symbol] : singles) end = std::max<char32_t>(end, cp + 1);
  m.bmp_symbol_.assign(end, -1);
  for (const auto& [cp, symbol] : singles) m.bmp_symbol_[cp] = symbol;
  return m;
}

void BpeModel::EmitPiece(int32_t symbol, std::string_view text, std::vector<int32_t>* ids) const {
  if (symbol >= 0 && symbol < vocab_->size()) {
    ids->push_back(symbol);
    return;
  }
  if (byte_fallback_) {
    bool all_bytes_known = true;
    for (char c : text) all_bytes_known &= byte_token_[static_cast<uint8_t>(c)] >= 0;
    if (all_bytes_known) {
      for (char c : text) ids->push_back(byte_token_[static_cast<uint8_t>(c)]);
      return;
    }
  }
  if (unk_id_) ids->push_back(*unk_id_);
}

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (std::optional<int32_t> id = vocab_->Find(word)) {
      ids->push_back(*id);
      return;
    }
  }
  // One node per code point; merging keeps the left node and unlinks the right one.
  std::vector<int32_t> sym;
  std::vector<uint32_t> offset;
  sym.reserve(word.size());
  offset.reserve(word.size() + 1);
  for (size_t pos = 0; pos < word.size();) {
    const size_t start = pos;
    const char32_t cp = NextCodePoint(word, &pos);
    offset.push_back(static_cast<uint32_t>(start));
    sym.push_back(cp < bmp_symbol_.size() ? bmp_symbol_[cp]
                  : cp < 0x10000              ? -1
                                              : SymbolOf(word.substr(start, pos - start)));
  }
  const int32_t n = static_cast<int32_t>(sym.size());
  offset.push_back(static_cast<uint32_t>(word.size()));
  if (n == 1) {
    EmitPiece(sym[0], word, ids);
    return;
  }

  std::vector<int32_t> prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  // Candidate merges ordered by (rank, position of the left node): the reference breaks rank ties by a
  // positional bias, which orders exactly like the left node's original index.
  struct Candidate {
    int32_t rank, left, right, left_sym, right_sym, result;
  };
  auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  };
  std::vector<Candidate> heap;
  heap.reserve(n);
  auto consider = [&](int32_t left, int32_t right) {
    if (sym[left] < 0 || sym[right] < 0) return;
    const MergeSlot* slot = FindMerge(sym[left], sym[right]);
    if (slot == nullptr) return;
    heap.push_back({slot->rank, left, right, sym[left], sym[right], slot->result});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i, i + 1);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate c = heap.back();
    heap.pop_back();
    // Stale when either side has merged with something else since this candidate was queued: a node's
    // symbol only ever grows, so unchanged symbols and adjacency mean the pair is still there.
    if (next[c.left] != c.right || sym[c.left] != c.left_sym || sym[c.right] != c.right_sym) continue;
    sym[c.left] = c.result;
    next[c.left] = next[c.right];
    if (next[c.right] >= 0) prev[next[c.right]] = c.left;
    sym[c.right] = -2;  // unlinked
    if (prev[c.left] >= 0) consider(prev[c.left], c.left);
    if (next[c.left] >= 0) consider(c.left, next[c.left]);
  }

  for (int32_t i = 0; i >= 0; i = next[i]) {
    const uint32_t end = next[i] >= 0 ? offset[next[i]] : offset[n];
    EmitPiece(sym[i], word.substr(offset[i], end - offset[i]), ids);
  }
}

}  // namespace layerpipe
