// The layerpipe subcommands. Each returns the process exit status and prints its own errors.
#ifndef LAYERPIPE_CLI_COMMANDS_H_
#define LAYERPIPE_CLI_COMMANDS_H_

#include <string>
#include <vector>

namespace layerpipe::cli {

int RunGenerate(const std::vector<std::string>& argv);
int RunScore(const std::vector<std::string>& argv);
int RunTokenize(const std::vector<std::string>& argv);
int RunMakeCheckpoint(const std::vector<std::string>& argv);
int RunJob(const std::vector<std::string>& argv);
int RunCluster(const std::vector<std::string>& argv);

}  // namespace layerpipe::cli

#endif  // LAYERPIPE_CLI_COMMANDS_H_
