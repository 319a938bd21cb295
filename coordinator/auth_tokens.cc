#include "coordinator/auth_tokens.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/log.h"

namespace layerpipe {
namespace {

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// gRPC metadata values are printable ASCII; a space or ':' would make the file ambiguous.
bool ValidToken(absl::string_view t) {
  if (t.empty()) return false;
  for (char c : t) {
    if (c <= ' ' || c > '~' || c == ':') return false;
  }
  return true;
}

bool SameBytes(absl::string_view a, absl::string_view b) {
  // Length is not secret (it is the same for every token an operator generates); the content is.
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::StatusOr<std::vector<AuthToken>> ParseAuthTokens(absl::string_view text, const std::string& path) {
  std::vector<AuthToken> tokens;
  std::set<std::string> seen;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    AuthToken t;
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) {
      t.name = absl::StrCat("line-", line_no);
      t.token = std::string(line);
    } else {
      t.name = std::string(absl::StripAsciiWhitespace(line.substr(0, colon)));
      t.token = std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      if (t.name.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": empty client name before ':'"));
      }
    }
    if (!ValidToken(t.token)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", line_no, ": a token must be non-empty printable ASCII without spaces or ':'"));
    }
    if (!seen.insert(t.token).second) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": the same token appears twice"));
    }
    tokens.push_back(std::move(t));
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " holds no token: every client would be refused"));
  }
  return tokens;
}

AuthTokens::AuthTokens(std::string path, std::chrono::steady_clock::duration recheck, std::string text,
                       std::vector<AuthToken> tokens)
    : path_(std::move(path)),
      recheck_(recheck),
      text_(std::move(text)),
      tokens_(std::move(tokens)),
      last_read_(std::chrono::steady_clock::now()) {}

absl::StatusOr<std::unique_ptr<AuthTokens>> AuthTokens::Load(const std::string& path,
                                                             std::chrono::steady_clock::duration recheck) {
  auto text = ReadText(path);
  if (!text.ok()) return text.status();
  auto tokens = ParseAuthTokens(*text, path);
  if (!tokens.ok()) return tokens.status();
  return std::unique_ptr<AuthTokens>(new AuthTokens(path, recheck, *std::move(text), *std::move(tokens)));
}

void AuthTokens::MaybeReload() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_read_ < recheck_) return;
  last_read_ = now;
  auto text = ReadText(path_);
  if (!text.ok()) {
    LP_LOG(WARNING) << "keeping the previous tokens: " << text.status().message();
    return;
  }
  if (*text == text_) return;
  auto tokens = ParseAuthTokens(*text, path_);
  text_ = *std::move(text);  // a broken file is reported once, not on every recheck
  if (!tokens.ok()) {
    LP_LOG(WARNING) << "keeping the previous tokens: " << tokens.status().message();
    return;
  }
  tokens_ = *std::move(tokens);
  LP_LOG(INFO) << "reloaded " << tokens_.size() << " tokens from " << path_;
}

std::optional<std::string> AuthTokens::Lookup(absl::string_view token) {
  std::lock_guard<std::mutex> lock(mu_);
  MaybeReload();
  std::optional<std::string> name;
  for (const AuthToken& t : tokens_) {
    if (SameBytes(t.token, token) && !name) name = t.name;  // no early exit: every entry costs the same
  }
  return name;
}

size_t AuthTokens::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return tokens_.size();
}

}  // namespace layerpipe
