// Command-line parsing of the servers (layerpipe-worker, layerpipe-coordinator, layerpipe-mpi): absl
// flags, spelled with dashes or underscores (common/dash_flags.h), and
//   --help     lists every flag the program defines, whichever of the project's files defines it, and
//              exits 0. absl's own --help (20220623) lists only the flags of a file named after the
//              program (none of ours is: the servers' flags live in main.cc and
//              coordinator/coordinator_flags.cc) and exits 1;
//   --version  prints "PROGRAM 0.1.0 (git 1a2b3c4)" (common/version.h) and exits 0.
// absl's --helpfull (absl's own flags too; the deploy checks read it) and --helpshort stay absl's,
// with the same choice of files.
#ifndef LAYERPIPE_COMMON_SERVER_FLAGS_H_
#define LAYERPIPE_COMMON_SERVER_FLAGS_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace layerpipe {

// `args`: argv (argv[0] first) up to, not including, anything that is not the program's own (such as
// layerpipe-mpi's client command after "--"). `usage` heads --help. Exits as absl::ParseCommandLine
// does on a bad flag.
void ParseServerFlags(std::vector<std::string> args, absl::string_view program, absl::string_view usage);

// The text --help prints (exposed for tests).
std::string ServerFlagsHelp(absl::string_view usage);

}  // namespace layerpipe

#endif  // LAYERPIPE_COMMON_SERVER_FLAGS_H_
