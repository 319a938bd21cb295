// The bearer tokens clients of the coordinator's API present, read from a file (typically a mounted
// Kubernetes Secret) and re-read while serving, so that tokens can be added, rotated or revoked
// without a restart.
//
// File format: one token per line, either "token" or "name:token". Blank lines and lines starting with
// '#' are skipped; spaces around names and tokens are ignored. Tokens are printable ASCII without
// spaces or ':'. Several tokens may share a name (e.g. the old and the new one during a rotation): the
// name is the client's identity, which per-client limits count by. An unnamed token is called
// "line-N" after its line.
#ifndef LAYERPIPE_COORDINATOR_AUTH_TOKENS_H_
#define LAYERPIPE_COORDINATOR_AUTH_TOKENS_H_

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace layerpipe {

struct AuthToken {
  std::string name;
  std::string token;
};

// Parses the text of a token file; errors name `path` and the line. A file without any token is an
// error (it would lock every client out).
absl::StatusOr<std::vector<AuthToken>> ParseAuthTokens(absl::string_view text, const std::string& path);

class AuthTokens {
 public:
  // Reads and parses `path`. While serving, the file is read again when a lookup comes `recheck` or
  // more after the last read; if it no longer parses, the previous tokens stay (with a message on
  // stderr) rather than locking everyone out.
  static absl::StatusOr<std::unique_ptr<AuthTokens>> Load(
      const std::string& path, std::chrono::steady_clock::duration recheck = std::chrono::seconds(1));

  // The name of the client that `token` belongs to; nullopt for an unknown token. Compares in time
  // independent of where a wrong token differs.
  std::optional<std::string> Lookup(absl::string_view token);

  size_t size();

 private:
  AuthTokens(std::string path, std::chrono::steady_clock::duration recheck, std::string text,
             std::vector<AuthToken> tokens);
  void MaybeReload();  // under mu_

  const std::string path_;
  const std::chrono::steady_clock::duration recheck_;
  std::mutex mu_;
  std::string text_;  // as last read, to skip parsing when nothing changed
  std::vector<AuthToken> tokens_;
  std::chrono::steady_clock::time_point last_read_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_AUTH_TOKENS_H_
