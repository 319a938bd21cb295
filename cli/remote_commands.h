// `layerpipe generate --coordinator` and `layerpipe score --coordinator`: the same commands served by a
// cluster instead of a locally loaded model. The caller has parsed argv with the local command's flags.
#ifndef LAYERPIPE_CLI_REMOTE_COMMANDS_H_
#define LAYERPIPE_CLI_REMOTE_COMMANDS_H_

#include "cli/args.h"

namespace layerpipe::cli {

int RunRemoteGenerate(const Args& args);
int RunRemoteScore(const Args& args);

}  // namespace layerpipe::cli

#endif  // LAYERPIPE_CLI_REMOTE_COMMANDS_H_
