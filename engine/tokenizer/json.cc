#include "engine/tokenizer/json.h"

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace layerpipe {
namespace {

using json = nlohmann::json;

// SAX handler: builds a JSON tree for everything but model.vocab and model.merges, which it flattens.
class Reader {
 public:
  Reader(TokenizerJson* out, const std::string& source) : out_(out), source_(source) {}

  const absl::Status& error() const { return error_; }

  bool null() { return Value(json(nullptr)); }
  bool boolean(bool v) { return Value(json(v)); }
  bool number_integer(json::number_integer_t v) { return Integer(v); }
  bool number_unsigned(json::number_unsigned_t v) {
    return Integer(v > static_cast<json::number_unsigned_t>(INT64_MAX) ? -1 : static_cast<int64_t>(v));
  }
  bool number_float(json::number_float_t v, const json::string_t&) { return Value(json(v)); }
  bool binary(json::binary_t&) { return Fail("binary values are not JSON"); }

  bool string(json::string_t& v) {
    if (mode_ == Mode::kVocab) return Fail(absl::StrCat("model.vocab entry '", vocab_key_, "' is not an integer"));
    if (mode_ == Mode::kMerges) {
      if (in_pair_) {
        pair_.push_back(std::move(v));
        return true;
      }
      const size_t space = v.find(' ');
      if (space == std::string::npos) {
        return Fail(absl::StrCat("merge ", out_->merges.size(), " (\"", v, "\") has no space"));
      }
      std::string right = v.substr(space + 1);
      right.resize(std::min(right.size(), right.find(' ')));
      v.resize(space);
      out_->merges.emplace_back(std::move(v), std::move(right));
      return true;
    }
    return Value(json(std::move(v)));
  }

  bool key(json::string_t& k) {
    if (mode_ == Mode::kVocab) {
      vocab_key_ = std::move(k);
    } else {
      pending_key_ = std::move(k);
    }
    return true;
  }

  bool start_object(std::size_t) {
    if (mode_ != Mode::kTree) return Fail(mode_ == Mode::kVocab ? "model.vocab values must be integers"
                                                                 : "a merge must be [left, right] or \"left right\"");
    if (InModel() && pending_key_ == "vocab") {
      mode_ = Mode::kVocab;
      out_->has_vocab = true;
      return true;
    }
    return Open(json::object());
  }

  bool end_object() {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kTree;
      return true;
    }
    return Close();
  }

  bool start_array(std::size_t) {
    if (mode_ == Mode::kVocab) return Fail("model.vocab values must be integers");
    if (mode_ == Mode::kMerges) {
      if (in_pair_) return Fail(absl::StrCat("merge ", out_->merges.size(), " is nested too deeply"));
      in_pair_ = true;
      pair_.clear();
      return true;
    }
    if (InModel() && pending_key_ == "merges") {
      mode_ = Mode::kMerges;
      out_->has_merges = true;
      return true;
    }
    return Open(json::array());
  }

  bool end_array() {
    if (mode_ == Mode::kMerges) {
      if (!in_pair_) {
        mode_ = Mode::kTree;
        return true;
      }
      in_pair_ = false;
      if (pair_.size() != 2) return Fail(absl::StrCat("merge ", out_->merges.size(), " is not a pair of strings"));
      out_->merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      return true;
    }
    return Close();
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    return Fail(absl::StrCat("not valid JSON: ", e.what()));
  }

 private:
  enum class Mode { kTree, kVocab, kMerges };
  static constexpr size_t kMaxDepth = 64;

  bool Fail(const std::string& what) {
    if (error_.ok()) error_ = absl::InvalidArgumentError(absl::StrCat("tokenizer file '", source_, "': ", what));
    return false;
  }

  // Directly inside the top-level "model" object.
  bool InModel() const { return stack_.size() == 2 && keys_[1] == "model" && stack_[1]->is_object(); }

  bool Integer(int64_t v) {
    if (mode_ == Mode::kVocab) {
      out_->vocab.emplace_back(std::move(vocab_key_), v);
      return true;
    }
    if (mode_ == Mode::kMerges) return Fail(absl::StrCat("merge ", out_->merges.size(), " holds a number"));
    return Value(json(v));
  }

  bool Value(json&& v) {
    if (mode_ == Mode::kVocab) return Fail(absl::StrCat("model.vocab entry '", vocab_key_, "' is not an integer"));
    if (mode_ == Mode::kMerges) return Fail(absl::StrCat("merge ", out_->merges.size(), " holds a non-string"));
    if (stack_.empty()) {
      out_->root = std::move(v);
      return true;
    }
    json& top = *stack_.back();
    if (top.is_object()) {
      top[pending_key_] = std::move(v);
    } else {
      top.push_back(std::move(v));
    }
    return true;
  }

  bool Open(json&& container) {
    // The sections are walked recursively (a normalizer Sequence holds normalizers, ...) and dump()
    // recurses, so a file nested a million levels deep would overflow the stack. Real files nest fewer
    // than 10 levels.
    if (stack_.size() >= kMaxDepth) return Fail(absl::StrCat("JSON nested deeper than ", kMaxDepth, " levels"));
    if (stack_.empty()) {
      out_->root = std::move(container);
      stack_.push_back(&out_->root);
      keys_.emplace_back();
      return true;
    }
    json& top = *stack_.back();
    if (top.is_object()) {
      json& child = top[pending_key_] = std::move(container);
      stack_.push_back(&child);
      keys_.push_back(pending_key_);
    } else {
      top.push_back(std::move(container));
      stack_.push_back(&top.back());
      keys_.emplace_back();
    }
    return true;
  }

  bool Close() {
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }

  TokenizerJson* out_;
  const std::string& source_;
  absl::Status error_;
  Mode mode_ = Mode::kTree;
  std::vector<json*> stack_;
  std::vector<std::string> keys_;  // the key each open container was stored under ("" in arrays)
  std::string pending_key_;
  std::string vocab_key_;
  bool in_pair_ = false;
  std::vector<std::string> pair_;
};

}  // namespace

absl::StatusOr<TokenizerJson> ParseTokenizerJson(std::string_view text, const std::string& source) {
  TokenizerJson out;
  Reader reader(&out, source);
  const bool ok = json::sax_parse(text.begin(), text.end(), &reader);
  if (!ok || !reader.error().ok()) {
    if (!reader.error().ok()) return reader.error();
    return absl::InvalidArgumentError(absl::StrCat("tokenizer file '", source, "': not valid JSON"));
  }
  return out;
}

}  // namespace layerpipe
