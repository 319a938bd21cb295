#include "cli/child_process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace layerpipe::cli {

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(std::string name, const std::string& path,
                                                                  const std::vector<std::string>& argv,
                                                                  bool capture_stdout,
                                                                  const sigset_t& child_mask) {
  // Everything the child needs is built before fork: between fork and exec only async-signal-safe calls.
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  int fds[2] = {-1, -1};
  // O_CLOEXEC: a sibling started later must not hold this pipe open, or we would never see its EOF.
  if (capture_stdout && pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    if (capture_stdout) {
      close(fds[0]);
      close(fds[1]);
    }
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(err)));
  }
  if (pid == 0) {
    // No orphans: the kernel kills us when the supervisor dies, even by SIGKILL. If it already died
    // between fork and prctl, we have been re-parented and must go now.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    if (capture_stdout && dup2(fds[1], STDOUT_FILENO) < 0) _exit(127);
    sigprocmask(SIG_SETMASK, &child_mask, nullptr);
    execv(path.c_str(), cargv.data());
    const char msg[] = "layerpipe cluster: exec failed\n";
    (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
    _exit(127);
  }
  if (capture_stdout) close(fds[1]);
  std::unique_ptr<ChildProcess> child(new ChildProcess(std::move(name), pid, capture_stdout ? fds[0] : -1));
  if (capture_stdout) child->reader_ = std::thread([c = child.get()] { c->ReadStdout(); });
  return child;
}

ChildProcess::ChildProcess(std::string name, pid_t pid, int stdout_fd)
    : name_(std::move(name)), pid_(pid), stdout_fd_(stdout_fd) {}

ChildProcess::~ChildProcess() {
  if (!Poll()) {
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    exited_ = true;
    wait_status_ = status;
  }
  if (reader_.joinable()) reader_.join();
  if (stdout_fd_ >= 0) close(stdout_fd_);
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

}  // namespace layerpipe::cli
