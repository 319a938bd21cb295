// common/child_process.h: the one way layerpipe programs start children (layerpipe cluster's servers and
// client, layerpipe-mpi's client command).
#include "common/child_process.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

namespace layerpipe {
namespace {

using std::chrono::milliseconds;

// Polls until the child has exited (at most 10 s).
bool WaitExit(ChildProcess& c) {
  for (int i = 0; i < 500 && !c.Poll(); ++i) std::this_thread::sleep_for(milliseconds(20));
  return c.exited();
}

TEST(ChildProcessTest, CapturedStdoutGivesTheListeningAddress) {
  ChildOptions options;
  options.capture_stdout = true;
  auto c = ChildProcess::Start("server", "/bin/sh",
                               {"sh", "-c", "echo first; echo 'demo listening on 127.0.0.1:4567'; exit 3"}, options);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(WaitExit(**c));
  // The reader thread may still be on its way to the line.
  for (int i = 0; i < 500 && !(*c)->listening_address(); ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ((*c)->listening_address().value_or(""), "127.0.0.1:4567");
  EXPECT_EQ((*c)->ShellStatus(), 3);
  EXPECT_EQ((*c)->DescribeExit(), "exited with status 3");
}

TEST(ChildProcessTest, NamesWithoutASlashAreLookedUpOnPath) {
  auto c = ChildProcess::Start("true", "true", {"true"});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(WaitExit(**c));
  EXPECT_EQ((*c)->ShellStatus(), 0);
}

TEST(ChildProcessTest, AFailedExecIsAnErrorOfStart) {
  auto missing = ChildProcess::Start("x", "/nonexistent/layerpipe-nothing", {"layerpipe-nothing"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot run /nonexistent/layerpipe-nothing"), std::string::npos)
      << missing.status();
  auto unknown = ChildProcess::Start("x", "layerpipe-no-such-program", {"layerpipe-no-such-program"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("not found on PATH"), std::string::npos) << unknown.status();
}

TEST(ChildProcessTest, StopEndsAChildThatBlocksSigterm) {
  // The servers block SIGTERM; the child gets the default action back unless its mask blocks it.
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigset_t old;
  pthread_sigmask(SIG_BLOCK, &block, &old);
  auto polite = ChildProcess::Start("sleep", "/bin/sleep", {"sleep", "30"});
  ChildOptions stubborn_options;
  stubborn_options.signal_mask = block;
  auto stubborn = ChildProcess::Start("sleep", "/bin/sleep", {"sleep", "30"}, stubborn_options);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(polite.ok() && stubborn.ok());

  (*polite)->Stop(milliseconds(5000));
  EXPECT_TRUE((*polite)->exited());
  EXPECT_EQ((*polite)->DescribeExit(), "was killed by SIGTERM");
  EXPECT_EQ((*polite)->ShellStatus(), 128 + SIGTERM);

  const auto start = std::chrono::steady_clock::now();
  (*stubborn)->Stop(milliseconds(200));
  EXPECT_TRUE((*stubborn)->exited());
  EXPECT_EQ((*stubborn)->DescribeExit(), "was killed by SIGKILL");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace layerpipe
