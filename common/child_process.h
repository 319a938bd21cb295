// A child process of a layerpipe program: `layerpipe cluster`'s workers, coordinator and one-shot client,
// and layerpipe-mpi's client command. It dies with its parent (PR_SET_PDEATHSIG), even when the parent is
// killed by SIGKILL, and its stdout can be read back line by line, so that the parent learns a server's
// address from its "listening on HOST:PORT" line.
// fork + exec rather than posix_spawn, which cannot set PR_SET_PDEATHSIG. That holds in an MPI process too
// (layerpipe-mpi's rank 0): the child only execs; Open MPI's caveat about fork() is for children that go on
// touching memory registered with the network.
#ifndef LAYERPIPE_COMMON_CHILD_PROCESS_H_
#define LAYERPIPE_COMMON_CHILD_PROCESS_H_

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace layerpipe {

struct ChildOptions {
  // Read the child's stdout back: the first line holding "listening on " gives listening_address(), and
  // every other line is copied to our stderr as "[name] line" (so that another child, such as a one-shot
  // client, can own our stdout). Otherwise the child writes to our stdout. stderr is always shared.
  bool capture_stdout = false;
  // stdin from /dev/null rather than ours.
  bool null_stdin = false;
  // The child's signal mask; unset: nothing blocked. SIGTERM and SIGINT get their default action either way
  // (the servers block them, and a child must still stop when told).
  std::optional<sigset_t> signal_mask;
};

class ChildProcess {
 public:
  // Starts `path` (a name without '/' is looked up on PATH) with `argv` (argv[0] included). An error when it
  // cannot be started, exec included: the exec's failure comes back from the child before this returns.
  // Call this from the main thread only: PR_SET_PDEATHSIG fires when the thread that forked exits, not the
  // process.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(std::string name, const std::string& path,
                                                             const std::vector<std::string>& argv,
                                                             const ChildOptions& options = {});
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // Kills and reaps the child if it still runs, then joins the stdout reader.
  ~ChildProcess();

  const std::string& name() const { return name_; }
  pid_t pid() const { return pid_; }
  // HOST:PORT from the child's "... listening on HOST:PORT" line, once printed (with capture_stdout).
  std::optional<std::string> listening_address() const;

  // Reaps the child if it has exited (never blocks); true once it has.
  bool Poll();
  bool exited() const { return exited_; }
  // "exited with status N" or "was killed by SIGNAME", once exited.
  std::string DescribeExit() const;
  // The status a shell would report: the exit status, or 128 + the signal.
  int ShellStatus() const;
  // Sends `sig` unless the child has already been reaped (its pid may have been reused).
  void Signal(int sig);
  // SIGTERM, then SIGKILL if it has not exited within `grace`; reaps it.
  void Stop(std::chrono::milliseconds grace);

 private:
  ChildProcess(std::string name, pid_t pid, int stdout_fd);
  void ReadStdout();
  void KillAndReap();

  const std::string name_;
  const pid_t pid_;
  const int stdout_fd_;  // -1 without capture
  std::thread reader_;
  bool exited_ = false;
  int wait_status_ = 0;
  mutable std::mutex mu_;
  std::optional<std::string> address_;  // guarded by mu_
};

}  // namespace layerpipe

#endif  // LAYERPIPE_COMMON_CHILD_PROCESS_H_
