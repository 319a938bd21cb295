#include "common/log.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace layerpipe {
namespace {

std::string& ProgramName() {
  // glibc keeps argv[0]'s base name for us; no main() has to pass it.
  static std::string name = program_invocation_short_name;
  return name;
}

std::atomic<LogSeverity> min_severity{LogSeverity::kInfo};

char Letter(LogSeverity s) {
  switch (s) {
    case LogSeverity::kInfo: return 'I';
    case LogSeverity::kWarning: return 'W';
    case LogSeverity::kError: return 'E';
    case LogSeverity::kFatal: return 'F';
  }
  return '?';
}

}  // namespace

void SetLogProgramName(std::string name) { ProgramName() = std::move(name); }
const std::string& LogProgramName() { return ProgramName(); }
void SetMinLogSeverity(LogSeverity min) { min_severity.store(min); }

LogMessage::~LogMessage() {
  if (severity_ < min_severity.load() && severity_ != LogSeverity::kFatal) return;
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm local;
  localtime_r(&tv.tv_sec, &local);
  char stamp[40];
  const size_t n = std::strftime(stamp, sizeof stamp, "%Y%m%d %H:%M:%S", &local);
  std::snprintf(stamp + n, sizeof stamp - n, ".%06ld ", static_cast<long>(tv.tv_usec));
  const std::string line = Letter(severity_) + std::string(stamp) + ProgramName() + "] " + stream_.str() + "\n";
  // One write: lines of concurrent threads stay whole.
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
  if (severity_ == LogSeverity::kFatal) std::abort();
}

}  // namespace layerpipe
