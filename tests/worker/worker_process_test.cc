// The layerpipe-worker executable: its stdout line, flags, refusals and clean exit on SIGTERM/SIGINT.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "proto/internal.grpc.pb.h"

namespace {

std::string WorkerBin() {
  const char* b = std::getenv("LAYERPIPE_BIN");
  return std::string(b ? b : LAYERPIPE_BIN_DIR) + "/layerpipe-worker";
}

// A worker process with its stdout on a pipe (stderr is inherited).
class WorkerProcess {
 public:
  explicit WorkerProcess(const std::vector<std::string>& args) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
      std::vector<std::string> all = {WorkerBin()};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (std::string& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    out_ = fdopen(fds[0], "r");
  }
  ~WorkerProcess() {
    if (pid_ > 0 && !waited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_) fclose(out_);
  }

  // The next stdout line, without its newline ("" at end of output).
  std::string ReadLine() {
    std::string line;
    for (int c; (c = fgetc(out_)) != EOF && c != '\n';) line.push_back(static_cast<char>(c));
    return line;
  }
  std::string ReadRest() {
    std::string rest;
    for (int c; (c = fgetc(out_)) != EOF;) rest.push_back(static_cast<char>(c));
    return rest;
  }

  // The exit code, or -1 if it did not exit normally within the timeout.
  int Wait(std::chrono::seconds timeout = std::chrono::seconds(10)) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (std::chrono::steady_clock::now() < end) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        waited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  void Signal(int sig) { kill(pid_, sig); }

 private:
  pid_t pid_ = -1;
  bool waited_ = false;
  FILE* out_ = nullptr;
};

std::string ListeningAddress(WorkerProcess& w) {
  const std::string line = w.ReadLine();
  std::smatch m;
  const std::regex re("layerpipe-worker listening on (127\\.0\\.0\\.1:[0-9]+)");
  EXPECT_TRUE(std::regex_match(line, m, re)) << "stdout line: " << line;
  return m.size() > 1 ? m[1].str() : "";
}

TEST(WorkerProcess, PrintsOneLineServesStatusAndExitsCleanlyOnSigterm) {
  WorkerProcess w({"--listen", "127.0.0.1:0", "--kv-budget", "3M", "--threads", "1"});
  const std::string address = ListeningAddress(w);
  ASSERT_FALSE(address.empty());
  auto stub = layerpipe::internal::v1::Worker::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  layerpipe::internal::v1::WorkerStatus status;
  ASSERT_TRUE(stub->Status(&ctx, layerpipe::internal::v1::WorkerStatusRequest(), &status).ok());
  EXPECT_FALSE(status.assigned());
  EXPECT_EQ(status.kv_capacity_bytes(), 3 << 20);
  w.Signal(SIGTERM);
  EXPECT_EQ(w.Wait(), 0);
  EXPECT_EQ(w.ReadRest(), "");  // exactly one line
}

TEST(WorkerProcess, ExitsCleanlyOnSigint) {
  WorkerProcess w({"--listen=127.0.0.1:0"});
  ASSERT_FALSE(ListeningAddress(w).empty());
  w.Signal(SIGINT);
  EXPECT_EQ(w.Wait(), 0);
}

TEST(WorkerProcess, RefusesBadFlagsAndABusyPort) {
  {
    WorkerProcess w({"--kv-budget", "8G"});
    EXPECT_EQ(w.Wait(), 2);  // no --listen
  }
  {
    WorkerProcess w({"--listen", "127.0.0.1:0", "--kv-budget", "lots"});
    EXPECT_EQ(w.Wait(), 2);
  }
  WorkerProcess first({"--listen", "127.0.0.1:0"});
  const std::string address = ListeningAddress(first);
  ASSERT_FALSE(address.empty());
  // A second worker must not share the port (gRPC would allow it with SO_REUSEPORT).
  WorkerProcess second({"--listen", address});
  EXPECT_EQ(second.Wait(), 1);
  EXPECT_EQ(second.ReadRest(), "");
  first.Signal(SIGTERM);
  EXPECT_EQ(first.Wait(), 0);
}

}  // namespace
