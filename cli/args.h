// Flag parsing for the layerpipe subcommands. Each subcommand declares its own flags, so a flag that
// belongs to another subcommand is an error rather than silently ignored (absl::flags are global).
//
// Why not CLI11 (Debian's libcli11-dev, 2.1.2 in Debian 12): it was tried against these subcommands and
// would change what users and tests see. It has no place for the typed accessors below and their messages
// ("--top-k must be an integer, got \"x\""), so it could only replace Parse(), and there:
//  - its errors are its own ("The following arguments were not expected: 1 --bogus", "--prompt: At Most 1
//    required but received 2"); "unknown flag --bogus", "flag --seed given more than once" and "flag --ids
//    needs a value" (tests/cli/cli_test.cc and the users' scripts read them) would have to be recovered by
//    parsing its message text, which differs between CLI11 versions;
//  - it refuses an empty --flag= (`--prompt=`: "1 required TEXT missing") while `--prompt ""` passes; here
//    both give the empty value;
//  - `--prompt --top-k 2` is an error about --prompt there, while here a flag's value is the next word
//    whatever it looks like.
// Parse() is 35 lines; keeping it keeps the interface exactly.
#ifndef LAYERPIPE_CLI_ARGS_H_
#define LAYERPIPE_CLI_ARGS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace layerpipe::cli {

struct FlagSpec {
  std::string name;
  bool is_bool = false;
  bool repeated = false;
  std::string help;
};

class Args {
 public:
  // Accepts --name=value, --name value, and bare --name for booleans.
  static absl::StatusOr<Args> Parse(const std::vector<std::string>& argv, const std::vector<FlagSpec>& specs);

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  absl::StatusOr<std::string> String(const std::string& name) const;  // required
  std::string StringOr(const std::string& name, const std::string& def) const;
  std::vector<std::string> All(const std::string& name) const;
  absl::StatusOr<int64_t> Int(const std::string& name, std::optional<int64_t> def = std::nullopt) const;
  absl::StatusOr<double> Double(const std::string& name, std::optional<double> def = std::nullopt) const;
  absl::StatusOr<bool> Bool(const std::string& name, bool def) const;
  // A comma-separated list of integer ids (e.g. 2,105,9).
  absl::StatusOr<std::vector<int32_t>> Ids(const std::string& name) const;

 private:
  std::map<std::string, std::vector<std::string>> values_;
};

std::string Usage(const std::string& command, const std::vector<FlagSpec>& specs);

absl::StatusOr<std::vector<int32_t>> ParseIdList(const std::string& flag, const std::string& text);

}  // namespace layerpipe::cli

#endif  // LAYERPIPE_CLI_ARGS_H_
