#include "engine/tokenizer/tokenizer.h"

#include <fstream>
#include <sstream>
#include <unordered_set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/json.h"
#include "nlohmann/json.hpp"
#include "common/json_shown.h"

namespace layerpipe {
namespace {

absl::Status Corrupt(const std::string& source, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer file '", source, "': ", what));
}

absl::Status Unsupported(const std::string& source, const std::string& what) {
  return absl::UnimplementedError(absl::StrCat("tokenizer file '", source, "': unsupported ", what));
}

// A nlohmann::json value as shown in an error message: its type, and for a scalar its text, cut (at a UTF-8

absl::StatusOr<std::vector<AddedToken>> ParseAddedTokens(const nlohmann::json& root, const std::string& source) {
  std::vector<AddedToken> added;
  if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return added;
  const nlohmann::json& list = root["added_tokens"];
  if (!list.is_array()) return Corrupt(source, "added_tokens must be a list");
  added.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& t = list[i];
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || t["id"].get<int64_t>() < 0 ||
        t["id"].get<int64_t>() >= (int64_t{1} << 31) - 1 || !t.contains("content") || !t["content"].is_string()) {
      return Corrupt(source, absl::StrCat("added_tokens[", i, "] needs an integer id and a string content"));
    }
    AddedToken token;
    token.id = t["id"].get<int32_t>();
    token.content = t["content"].get<std::string>();
    auto flag = [&t](const char* name) { return t.contains(name) && t[name].is_boolean() && t[name].get<bool>(); };
    token.special = flag("special");
    token.lstrip = flag("lstrip");
    token.rstrip = flag("rstrip");
    token.single_word = flag("single_word");
    token.normalized = flag("normalized");
    added.push_back(std::move(token));
  }
  return added;
}

// True when the match text[begin, end) is not glued to a word character on either side.
bool StandsAsWord(std::string_view text, size_t begin, size_t end) {
  if (begin > 0) {
    size_t start = begin - 1;
    while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
    if (IsWordChar(NextCodePoint(text, &start))) return false;
  }
  if (end < text.size()) {
    size_t pos = end;
    if (IsWordChar(NextCodePoint(text, &pos))) return false;
  }
  return true;
}

// The TemplateProcessing post-processor: the ids its "single" template puts before and after the
// sequence. Every id must be in the vocabulary, so that Encode only ever returns ids in [0, vocab.size()).
absl::Status ParsePostProcessor(const nlohmann::json& post, const Vocab& vocab, const std::string& source,
                                std::vector<int32_t>* prefix_ids, std::vector<int32_t>* suffix_ids) {
  if (post.is_null()) return absl::OkStatus();
  if (!post.is_object()) return Corrupt(source, absl::StrCat("post_processor must be an object, got ", post.type_name()));
  if (post.contains("type") && !post["type"].is_string()) {
    return Corrupt(source, absl::StrCat("post_processor.type must be a string, got ", Shown(post["type"])));
  }
  const std::string type = post.contains("type") ? post["type"].get<std::string>() : std::string();
  if (type != "TemplateProcessing") return Unsupported(source, absl::StrCat("post_processor type '", type, "'"));
  if (!post.contains("single") || !post["single"].is_array()) {
    return Corrupt(source, "TemplateProcessing has no single template");
  }
  static const nlohmann::json kNoSpecialTokens = nlohmann::json::object();
  const nlohmann::json& special_tokens =
      post.contains("special_tokens") && !post["special_tokens"].is_null() ? post["special_tokens"] : kNoSpecialTokens;
  if (!special_tokens.is_object()) {
    return Corrupt(source, absl::StrCat("post_processor.special_tokens must be an object, got ",
                                        special_tokens.type_name()));
  }
  bool after_sequence = false;
  const nlohmann::json& single = post["single"];
  for (size_t i = 0; i < single.size(); ++i) {
    const nlohmann::json& item = single[i];
    if (item.contains("Sequence")) {
      after_sequence = true;
      continue;
    }
    if (!item.contains("SpecialToken") || !item["SpecialToken"].contains("id") ||
        !item["SpecialToken"]["id"].is_string()) {
      return Corrupt(source, absl::StrCat("TemplateProcessing item single[", i,
                                          "] is neither Sequence nor SpecialToken with a string id"));
    }
    const std::string name = item["SpecialToken"]["id"].get<std::string>();
    std::vector<int32_t>& target = after_sequence ? *suffix_ids : *prefix_ids;
    // The reference converts the template's token spelling through the vocabulary.
    if (std::optional<int32_t> id = vocab.Find(name)) {
      target.push_back(*id);
      continue;
    }
    if (!special_tokens.contains(name) || !special_tokens[name].contains("ids")) {
      return Corrupt(source, absl::StrCat("template token '", name, "' is not in the vocabulary"));
    }
    const std::string path = absl::StrCat("post_processor.special_tokens.", name, ".ids");
    const nlohmann::json& ids = special_tokens[name]["ids"];
    if (!ids.is_array()) return Corrupt(source, absl::StrCat(path, " must be a list, got ", ids.type_name()));
    for (size_t k = 0; k < ids.size(); ++k) {
      const nlohmann::json& id = ids[k];
      if (!id.is_number_integer()) {
        return Corrupt(source, absl::StrCat(path, "[", k, "] must be an integer, got ", Shown(id)));
      }
      const bool in_vocab = id.is_number_unsigned() ? id.get<uint64_t>() < static_cast<uint64_t>(vocab.size())
                                                    : id.get<int64_t>() >= 0 && id.get<int64_t>() < vocab.size();
      if (!in_vocab) {
        return Corrupt(source, absl::StrCat(path, "[", k, "] = ", id.dump(), " is outside the vocabulary [0, ",
                                            vocab.size(), ")"));
      }
      target.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& tokenizer_json_path) {
  std::ifstream file(tokenizer_json_path, std::ios::binary);
  if (!file) {
    return absl::NotFoundError(absl::StrCat("tokenizer file '", tokenizer_json_path, "' cannot be opened"));
  }
  std::ostringstream buffer;
  buffer << file.rdbuf();
  if (file.bad()) {
    return absl::NotFoundError(absl::StrCat("tokenizer file '", tokenizer_json_path, "' cannot be read"));
  }
  return FromJsonText(buffer.view(), tokenizer_json_path);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJsonText(std::string_view json_text,
                                                                   const std::string& source) {
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  if (absl::Status s = tokenizer->Init(source, json_text); !s.ok()) return s;
  return tokenizer;
}

absl::Status Tokenizer::Init(const std::string& source, std::string_view json_text) {
  absl::StatusOr<TokenizerJson> parsed = ParseTokenizerJson(json_text, source);
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json& root = parsed->root;
  if (!root.is_object()) return Corrupt(source, "top level is not a JSON object");
  if (!root.contains("model") || !root["model"].is_object()) return Corrupt(source, "no \"model\" object");
  const nlohmann::json& model = root["model"];
  if (model.contains("type") && !model["type"].is_string()) {
    return Corrupt(source, absl::StrCat("model.type must be a string, got ", Shown(model["type"])));
  }
  const std::string model_type = model.contains("type") ? model["type"].get<std::string>() : std::string();
  if (model_type != "BPE") {
    return Unsupported(source, absl::StrCat("model type '", model_type, "' (only BPE is implemented)"));
  }
  if (!parsed->has_vocab) return Corrupt(source, "model.vocab must be an object of token -> id");
  if (!parsed->has_merges) return Corrupt(source, "model.merges must be a list");

  absl::StatusOr<std::vector<AddedToken>> added = ParseAddedTokens(root, source);
  if (!added.ok()) return added.status();
  added_ = *std::move(added);
  absl::StatusOr<Vocab> vocab = Vocab::Build(parsed->vocab, added_, source);
  if (!vocab.ok()) return vocab.status();
  vocab_ = *std::move(vocab);
  std::optional<int32_t> model_unk_id;
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    const std::string& unk = model["unk_token"].get_ref<const std::string&>();
    for (const auto& [token, id] : parsed->vocab) {
      if (token == unk) model_unk_id = static_cast<int32_t>(id);
    }
  }
  absl::StatusOr<BpeModel> bpe = BpeModel::Build(model, parsed->merges, model_unk_id, vocab_, source);
  if (!bpe.ok()) return bpe.status();
  bpe_.emplace(*std::move(bpe));

  static const nlohmann::json kNull;
  auto section = [&root](const char* name) -> const nlohmann::json& {
    return root.contains(name) ? root[name] : kNull;
  };
  absl::StatusOr<Normalizer> normalizer = Normalizer::FromJson(section("normalizer"), source);
  if (!normalizer.ok()) return normalizer.status();
  normalizer_ = *std::move(normalizer);
  absl::StatusOr<PreTokenizer> pre_tokenizer = PreTokenizer::FromJson(section("pre_tokenizer"), source);
  if (!pre_tokenizer.ok()) return pre_tokenizer.status();
  pre_tokenizer_ = *std::move(pre_tokenizer);
  absl::StatusOr<TokenDecoder> decoder = TokenDecoder::FromJson(section("decoder"), source);
  if (!decoder.ok()) return decoder.status();
  decoder_ = *std::move(decoder);

  const nlohmann::json& post = section("post_processor");
  if (absl::Status s = ParsePostProcessor(post, vocab_, source, &prefix_ids_, &suffix_ids_); !s.ok()) return s;

  const size_t n_ids = static_cast<size_t>(vocab_.size());
  special_.assign(n_ids, false);
  std::unordered_set<std::string_view> special_contents;
  normalized_contents_.reserve(added_.size());  // reserved: the index below holds views into it
  for (int32_t i = 0; i < static_cast<int32_t>(added_.size()); ++i) {
    const AddedToken& t = added_[i];
    if (t.special) {
      special_[t.id] = true;
      special_contents.insert(t.content);
    }
    raw_added_index_.insert_or_assign(std::string_view(t.content), i);
    if (t.normalized && !normalizer_.empty()) {
      normalized_contents_.push_back(normalizer_.Apply(t.content));
      normalized_trie_.Insert(normalized_contents_.back(), i);
      normalized_added_index_.insert_or_assign(std::string_view(normalized_contents_.back()), i);
    } else {
      raw_trie_.Insert(t.content, i);
    }
  }
  skip_on_decode_.assign(n_ids, false);
  for (size_t id = 0; id < n_ids; ++id) {
    skip_on_decode_[id] = vocab_.HasToken(static_cast<int32_t>(id)) &&
                          special_contents.count(vocab_.Token(static_cast<int32_t>(id))) > 0;
  }
  unk_skipped_on_decode_ = special_contents.count(bpe_->unk_token()) > 0;
  return absl::OkStatus();
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < static_cast<int32_t>(special_.size()) && special_[id];
}

void Tokenizer::SplitOnAddedTokens(std::string_view text, const AddedTokenTrie& trie,
                                   const std::unordered_map<std::string_view, int32_t>& by_content,
                                   std::vector<Section>* sections) const {
  std::vector<std::string_view> parts;
  size_t start = 0;
  size_t i = 0;
  while (i < text.size()) {
    std::optional<std::pair<int32_t, size_t>> match = trie.LongestMatchAt(text, i);
    if (!match) {
      ++i;
      continue;
    }
    const auto [index, length] = *match;
    if (added_[index].single_word && !StandsAsWord(text, i, i + length)) {
      i += length;  // Hugging Face resumes scanning after a rejected match
      continue;
    }
    if (i > start) parts.push_back(text.substr(start, i - start));
    parts.push_back(text.substr(i, length));
    i += length;
    start = i;
  }
  if (start < text.size()) parts.push_back(text.substr(start));

  // Whitespace next to lstrip/rstrip tokens is dropped from the neighbouring parts, in the reference's order.
  for (size_t k = 0; k < parts.size(); ++k) {
    auto it = by_content.find(parts[k]);
    if (it == by_content.end()) continue;
    const AddedToken& token = added_[it->second];
    if (token.lstrip && k > 0) parts[k - 1] = TrimJsWhitespaceEnd(parts[k - 1]);
    if (token.rstrip && k + 1 < parts.size()) parts[k + 1] = TrimJsWhitespaceStart(parts[k + 1]);
  }
  for (std::string_view part : parts) {
    if (part.empty()) continue;
    auto it = by_content.find(part);
    if (it != by_content.end()) {
      sections->push_back({part, added_[it->second].id});
    } else {
      sections->push_back({part, std::nullopt});
    }
  }
}

void Tokenizer::EncodePlain(std::string_view text, std::vector<int32_t>* ids) const {
  const std::string normalized = normalizer_.Apply(text);
  if (normalized.empty()) return;

  auto encode_model = [this, ids](std::string_view piece) {
    std::vector<std::string_view> words;
    pre_tokenizer_.Split(piece, &words);
    const size_t first = ids->size();
    for (std::string_view word : words) bpe_->EncodeWord(word, ids);
    // fuse_unk: a run of unknown tokens within one model call collapses to a single one.
    if (bpe_->fuse_unk() && bpe_->unk_id()) {
      const int32_t unk = *bpe_->unk_id();
      size_t out = first;
      for (size_t k = first; k < ids->size(); ++k) {
        if ((*ids)[k] == unk && out > first && (*ids)[out - 1] == unk) continue;
        (*ids)[out++] = (*ids)[k];
      }
      ids->resize(out);
    }
  };

  if (normalized_trie_.empty()) {
    encode_model(normalized);
    return;
  }
  std::vector<Section> sections;
  SplitOnAddedTokens(normalized, normalized_trie_, normalized_added_index_, &sections);
  for (const Section& s : sections) {
    if (s.added_id) {
      ids->push_back(*s.added_id);
    } else {
      encode_model(s.text);
    }
  }
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos) const {
  const std::string clean = SanitizeUtf8(text);
  std::vector<int32_t> ids;
  ids.reserve(clean.size() / 3 + 4);
  if (add_bos) ids.insert(ids.end(), prefix_ids_.begin(), prefix_ids_.end());
  std::vector<Section> sections;
  SplitOnAddedTokens(clean, raw_trie_, raw_added_index_, &sections);
  for (const Section& s : sections) {
    if (s.added_id) {
      ids.push_back(*s.added_id);
    } else {
      EncodePlain(s.text, &ids);
    }
  }
  if (add_bos) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

Tokenizer::DecodePiece Tokenizer::PieceFor(int32_t id, bool skip_special_tokens) const {
  DecodePiece piece;
  std::string_view token;
  bool special_spelling;
  if (vocab_.HasToken(id)) {
    token = vocab_.Token(id);
    special_spelling = skip_on_decode_[id];
  } else {
    token = bpe_->unk_token();
    special_spelling = unk_skipped_on_decode_;
  }
  if (skip_special_tokens && special_spelling) {
    piece.skip = true;
    return piece;
  }
  piece.text = decoder_.Transform(token);
  piece.byte = decoder_.ByteValue(piece.text);
  return piece;
}

std::string Tokenizer::Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const {
  std::string out;
  // Consecutive byte-fallback tokens are decoded together, as one TextDecoder call per run.
  Utf8StreamDecoder run(/*strip_leading_bom=*/true);
  for (int32_t id : ids) {
    const DecodePiece piece = PieceFor(id, skip_special_tokens);
    if (piece.skip) continue;
    if (piece.byte >= 0) {
      run.Feed(static_cast<uint8_t>(piece.byte), &out);
    } else {
      run.Finish(&out);
      out += piece.text;
    }
  }
  run.Finish(&out);
  return out;
}

}  // namespace layerpipe
