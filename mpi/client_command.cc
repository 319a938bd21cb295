#include "mpi/client_command.h"

#include <chrono>
#include <filesystem>

#include "common/self_path.h"

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
  // The servers block SIGTERM/SIGINT in every thread; the client gets an empty mask (ChildOptions' default).
  ChildOptions options;
  options.null_stdin = true;
  auto child = ChildProcess::Start("client", binary_, argv, options);
  if (!child.ok()) return child.status();
  child_ = *std::move(child);
  return absl::OkStatus();
}

std::optional<int> ClientCommand::Poll() {
  if (!child_ || !child_->Poll()) return std::nullopt;
  return child_->ShellStatus();
}

void ClientCommand::Kill(int grace_ms) {
  if (child_) child_->Stop(std::chrono::milliseconds(grace_ms));
}

std::string SiblingOrPath(const std::string& name) {
  auto sibling = SiblingExecutable(name);
  return sibling.ok() ? *sibling : name;
}

}  // namespace layerpipe
