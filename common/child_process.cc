#include "common/child_process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace layerpipe {
namespace {

// `path` itself when it names a folder, else the first executable of that name on PATH. Looked up
// before fork: between fork and exec only async-signal-safe calls, which execvp is not.
absl::StatusOr<std::string> Resolve(const std::string& path) {
  if (path.find('/') != std::string::npos) return path;
  const char* env = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(env != nullptr ? env : "/usr/bin:/bin", ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/", path);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::FailedPreconditionError(absl::StrCat("cannot run ", path, ": not found on PATH"));
}

void CloseBoth(int fds[2]) {
  for (int i = 0; i < 2; ++i) {
    if (fds[i] >= 0) close(fds[i]);
    fds[i] = -1;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(std::string name, const std::string& path,
                                                                  const std::vector<std::string>& argv,
                                                                  const ChildOptions& options) {
  auto resolved = Resolve(path);
  if (!resolved.ok()) return resolved.status();
  // Everything the child needs is built before fork.
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  sigset_t mask;
  sigemptyset(&mask);
  if (options.signal_mask) mask = *options.signal_mask;
  struct sigaction default_action;
  std::memset(&default_action, 0, sizeof(default_action));
  default_action.sa_handler = SIG_DFL;
  // O_CLOEXEC on both pipes: a sibling started later must not hold the stdout pipe open, or we would never
  // see its EOF; and the exec closes `status`, which tells us it succeeded.
  int out[2] = {-1, -1}, status[2] = {-1, -1};
  if ((options.capture_stdout && pipe2(out, O_CLOEXEC) != 0) || pipe2(status, O_CLOEXEC) != 0) {
    const int err = errno;
    CloseBoth(out);
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(err)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    CloseBoth(out);
    CloseBoth(status);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(err)));
  }
  if (pid == 0) {
    // No orphans: the kernel kills us when the parent dies, even by SIGKILL. If it already died between
    // fork and prctl, we have been re-parented and must go now.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int err = 0;
    if (options.capture_stdout && dup2(out[1], STDOUT_FILENO) < 0) err = errno;
    if (err == 0 && options.null_stdin) {
      const int null = open("/dev/null", O_RDONLY);
      if (null < 0 || dup2(null, STDIN_FILENO) < 0) err = errno;
    }
    if (err == 0) {
      sigaction(SIGTERM, &default_action, nullptr);
      sigaction(SIGINT, &default_action, nullptr);
      sigprocmask(SIG_SETMASK, &mask, nullptr);
      execv(resolved->c_str(), cargv.data());
      err = errno;
    }
    (void)!write(status[1], &err, sizeof(err));
    _exit(127);
  }
  close(status[1]);
  if (options.capture_stdout) close(out[1]);
  int exec_error = 0;
  ssize_t n;
  while ((n = read(status[0], &exec_error, sizeof(exec_error))) < 0 && errno == EINTR) {
  }
  close(status[0]);
  if (n > 0) {  // the exec failed; the child is gone
    int ignored = 0;
    while (waitpid(pid, &ignored, 0) < 0 && errno == EINTR) {
    }
    if (options.capture_stdout) close(out[0]);
    return absl::FailedPreconditionError(absl::StrCat("cannot run ", *resolved, ": ", std::strerror(exec_error)));
  }
  std::unique_ptr<ChildProcess> child(
      new ChildProcess(std::move(name), pid, options.capture_stdout ? out[0] : -1));
  if (options.capture_stdout) child->reader_ = std::thread([c = child.get()] { c->ReadStdout(); });
  return child;
}

ChildProcess::ChildProcess(std::string name, pid_t pid, int stdout_fd)
    : name_(std::move(name)), pid_(pid), stdout_fd_(stdout_fd) {}

ChildProcess::~ChildProcess() {
  if (!Poll()) KillAndReap();
  if (reader_.joinable()) reader_.join();
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

void ChildProcess::KillAndReap() {
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  exited_ = true;
  wait_status_ = status;
}

void ChildProcess::ReadStdout() {
  std::string pending;
  char buf[4096];
  auto take_line = [&](std::string line) {
    const size_t at = line.find("listening on ");
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (at != std::string::npos && !address_) {
        std::string rest = line.substr(at + std::strlen("listening on "));
        absl::StripAsciiWhitespace(&rest);
        address_ = rest.substr(0, rest.find_first_of(" \t"));
        return;
      }
    }
    std::fprintf(stderr, "[%s] %s\n", name_.c_str(), line.c_str());
  };
  for (;;) {
    const ssize_t n = read(stdout_fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      take_line(pending.substr(0, nl));
      pending.erase(0, nl + 1);
    }
  }
  if (!pending.empty()) take_line(pending);
}

std::optional<std::string> ChildProcess::listening_address() const {
  std::lock_guard<std::mutex> lock(mu_);
  return address_;
}

bool ChildProcess::Poll() {
  if (exited_) return true;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    exited_ = true;
    wait_status_ = status;
  }
  return exited_;
}

std::string ChildProcess::DescribeExit() const {
  if (WIFSIGNALED(wait_status_)) {
    const char* sig = sigabbrev_np(WTERMSIG(wait_status_));
    return absl::StrCat("was killed by SIG", sig ? sig : absl::StrCat(WTERMSIG(wait_status_)));
  }
  return absl::StrCat("exited with status ", WEXITSTATUS(wait_status_));
}

int ChildProcess::ShellStatus() const {
  return WIFSIGNALED(wait_status_) ? 128 + WTERMSIG(wait_status_) : WEXITSTATUS(wait_status_);
}

void ChildProcess::Signal(int sig) {
  if (!Poll()) kill(pid_, sig);
}

void ChildProcess::Stop(std::chrono::milliseconds grace) {
  if (Poll()) return;
  kill(pid_, SIGTERM);
  const auto give_up = std::chrono::steady_clock::now() + grace;
  while (!Poll() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!Poll()) KillAndReap();
}

}  // namespace layerpipe
