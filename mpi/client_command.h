// The client command layerpipe-mpi's rank 0 runs once the cluster serves (the words after `--`): a
// `layerpipe` client subcommand such as `generate --ids 2,5 --max-new-tokens 8`, given
// --coordinator HOST:PORT unless it names one. A leading "layerpipe" word is accepted and dropped.
#ifndef LAYERPIPE_MPI_CLIENT_COMMAND_H_
#define LAYERPIPE_MPI_CLIENT_COMMAND_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/child_process.h"

namespace layerpipe {

class ClientCommand {
 public:
  // `words`: what followed `--`; `layerpipe_binary`: the client to run (a name without '/' is looked up
  // on PATH).
  ClientCommand(std::vector<std::string> words, std::string layerpipe_binary);
  ~ClientCommand();  // Kill()

  // InvalidArgument for an empty command.
  absl::Status Check() const;
  // Starts it against `coordinator` (common/child_process.h: it dies with this process) with default
  // signal handling, stdin from /dev/null, and this process's stdout and stderr. Call from the main thread.
  absl::Status Start(const std::string& coordinator);
  // Its exit status once it has exited (128+N after signal N); nullopt while it runs or before Start.
  std::optional<int> Poll();
  // SIGTERM, then SIGKILL after `grace_ms`, and reaps it. Nothing when it is not running.
  void Kill(int grace_ms = 3000);

 private:
  std::vector<std::string> words_;
  std::string binary_;
  std::unique_ptr<ChildProcess> child_;
};

// `name` in the directory of the running executable when it is there, else `name` (found on PATH).
std::string SiblingOrPath(const std::string& name);

}  // namespace layerpipe

#endif  // LAYERPIPE_MPI_CLIENT_COMMAND_H_
