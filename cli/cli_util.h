// Shared plumbing of the subcommands: flag parsing with --help, error reporting, engine options.
#ifndef LAYERPIPE_CLI_CLI_UTIL_H_
#define LAYERPIPE_CLI_CLI_UTIL_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cli/args.h"
#include "engine/engine.h"

namespace layerpipe::cli {

// Prints "layerpipe COMMAND: message" to stderr and returns the exit status for it.
int Fail(const std::string& command, const absl::Status& status);

// Parses argv; on --help prints usage and sets *exit_code = 0; on an error prints it and sets 2.
std::optional<Args> ParseOrExit(const std::string& command, const std::vector<std::string>& argv,
                                std::vector<FlagSpec> specs, int* exit_code);

// --temperature, --top-k, --top-p, --min-p, --repetition-penalty, --seed (local and remote generate).
std::vector<FlagSpec> SamplingFlagSpecs();

// --precision, --threads, --prefill-chunk, --device.
std::vector<FlagSpec> EngineFlagSpecs();
absl::StatusOr<EngineOptions> EngineOptionsFromArgs(const Args& args);

}  // namespace layerpipe::cli

#endif  // LAYERPIPE_CLI_CLI_UTIL_H_
