#include "mpi/client_command.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace layerpipe {

ClientCommand::ClientCommand(std::vector<std::string> words, std::string layerpipe_binary)
    : words_(std::move(words)), binary_(std::move(layerpipe_binary)) {
  if (!words_.empty() && std::filesystem::path(words_[0]).filename() == "layerpipe") words_.erase(words_.begin());
}

ClientCommand::~ClientCommand() { Kill(); }

absl::Status ClientCommand::Check() const {
  if (words_.empty()) return absl::InvalidArgumentError("the client command after -- is empty");
  return absl::OkStatus();
}

absl::Status ClientCommand::Start(const std::string& coordinator) {
  if (auto st = Check(); !st.ok()) return st;
  std::vector<std::string> argv = {binary_, words_[0]};
  bool named = false;
  for (const std::string& w : words_) named |= w == "--coordinator" || w.rfind("--coordinator=", 0) == 0;
  if (!named) {
    argv.push_back("--coordinator");
    argv.push_back(coordinator);
  }
  argv.insert(argv.end(), words_.begin() + 1, words_.end());
  std::vector<char*> ptrs;
  for (std::string& a : argv) ptrs.push_back(a.data());
  ptrs.push_back(nullptr);

  // The servers block SIGTERM/SIGINT in every thread; the client must not inherit that.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGINT);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  const int err = posix_spawnp(&pid_, binary_.c_str(), &actions, &attr, ptrs.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (err != 0) {
    pid_ = -1;
    return absl::FailedPreconditionError(absl::StrCat("cannot run ", binary_, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

std::optional<int> ClientCommand::Poll() {
  if (status_ || pid_ <= 0) return status_;
  int wstatus = 0;
  const pid_t got = waitpid(pid_, &wstatus, WNOHANG);
  if (got != pid_) return std::nullopt;
  pid_ = -1;
  status_ = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  return status_;
}

void ClientCommand::Kill(int grace_ms) {
  if (pid_ <= 0 || Poll()) return;
  kill(pid_, SIGTERM);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  while (!Poll() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!Poll()) {
    kill(pid_, SIGKILL);
    int wstatus = 0;
    waitpid(pid_, &wstatus, 0);
    pid_ = -1;
    status_ = 128 + SIGKILL;
  }
}

std::string SiblingOrPath(const std::string& name) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto sibling = self.parent_path() / name;
    if (access(sibling.c_str(), X_OK) == 0) return sibling.string();
  }
  return name;
}

}  // namespace layerpipe
