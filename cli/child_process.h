// A process started by `layerpipe cluster`: it dies with the supervisor, and its stdout is read line by line
// so that the supervisor learns the address from its "listening on HOST:PORT" line.
#ifndef LAYERPIPE_CLI_CHILD_PROCESS_H_
#define LAYERPIPE_CLI_CHILD_PROCESS_H_

#include <signal.h>
#include <sys/types.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace layerpipe::cli {

class ChildProcess {
 public:
  // Starts the executable `path` with `argv` (argv[0] included) and signal mask `child_mask`. With
  // `capture_stdout` the child's stdout is read back: the first line holding "listening on " gives the
  // address, and every other line is copied to our stderr as "[name] line" (so that a one-shot client owns
  // our stdout). Without it the child writes to our stdout. stderr is always shared.
  // Call this from the main thread only: PR_SET_PDEATHSIG fires when the thread that forked exits, not
  // the process.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(std::string name, const std::string& path,
                                                             const std::vector<std::string>& argv,
                                                             bool capture_stdout, const sigset_t& child_mask);
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // Kills and reaps the child if it still runs, then joins the stdout reader.
  ~ChildProcess();

  const std::string& name() const { return name_; }
  pid_t pid() const { return pid_; }
  // HOST:PORT from the child's "... listening on HOST:PORT" line, once printed.
  std::optional<std::string> listening_address() const;

  // Reaps the child if it has exited (never blocks); true once it has.
  bool Poll();
  bool exited() const { return exited_; }
  // "exited with status N" or "killed by SIGNAME", once exited.
  std::string DescribeExit() const;
  // The status a shell would report: the exit status, or 128 + the signal.
  int ShellStatus() const;
  // Sends `sig` unless the child has already been reaped (its pid may have been reused).
  void Signal(int sig);

 private:
  ChildProcess(std::string name, pid_t pid, int stdout_fd);
  void ReadStdout();

  const std::string name_;
  const pid_t pid_;
  const int stdout_fd_;  // -1 without capture
  std::thread reader_;
  bool exited_ = false;
  int wait_status_ = 0;
  mutable std::mutex mu_;
  std::optional<std::string> address_;  // guarded by mu_
};

}  // namespace layerpipe::cli

#endif  // LAYERPIPE_CLI_CHILD_PROCESS_H_
