// Server logging: LP_LOG(INFO) << "..."; one line per message on stderr, in the glog/abseil layout
//   I20261201 13:53:36.123456 layerpipe-worker] message
// (severity letter, local date and time to the microsecond, the program's name).
// Why not absl/log: Debian 12's abseil (20220623) predates it, and the project builds from Debian's
// packages. The macro names and levels follow it, so a later switch is a rename.
#ifndef LAYERPIPE_COMMON_LOG_H_
#define LAYERPIPE_COMMON_LOG_H_

#include <sstream>
#include <string>
#include <string_view>

namespace layerpipe {

enum class LogSeverity { kInfo, kWarning, kError, kFatal };

// The name every line carries; the default is the executable's file name.
void SetLogProgramName(std::string name);
const std::string& LogProgramName();
// Lines below `min` are dropped (e.g. kWarning for quiet tests). Default: kInfo.
void SetMinLogSeverity(LogSeverity min);

// One message: collects what is streamed into it and writes the whole line at once when destroyed
// (so lines of several threads never interleave). kFatal aborts after writing.
class LogMessage {
 public:
  explicit LogMessage(LogSeverity severity) : severity_(severity) {}
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  ~LogMessage();

  template <typename T>
  LogMessage& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

namespace log_internal {
constexpr LogSeverity kINFO = LogSeverity::kInfo;
constexpr LogSeverity kWARNING = LogSeverity::kWarning;
constexpr LogSeverity kERROR = LogSeverity::kError;
constexpr LogSeverity kFATAL = LogSeverity::kFatal;
}  // namespace log_internal

}  // namespace layerpipe

#define LP_LOG(severity) ::layerpipe::LogMessage(::layerpipe::log_internal::k##severity)

#endif  // LAYERPIPE_COMMON_LOG_H_
