// The standard Prometheus process metrics (process_resident_memory_bytes, process_cpu_seconds_total,
// ...) read from /proc at scrape time, and layerpipe_build_info: what every server's registry exports
// besides its own metrics (docs/metrics.md).
#ifndef LAYERPIPE_COMMON_PROCESS_METRICS_H_
#define LAYERPIPE_COMMON_PROCESS_METRICS_H_

#include <cstdint>
#include <optional>

#include "common/metrics.h"

namespace layerpipe {

// One reading of this process's resources; a field is empty when its source could not be read.
struct ProcessStats {
  std::optional<double> resident_memory_bytes;  // /proc/self/statm resident × page size
  std::optional<double> virtual_memory_bytes;   // /proc/self/statm size × page size
  std::optional<double> cpu_seconds;            // /proc/self/stat utime + stime, over _SC_CLK_TCK
  std::optional<double> open_fds;               // entries of /proc/self/fd
  std::optional<double> max_fds;                // RLIMIT_NOFILE's soft limit
  std::optional<double> start_time_seconds;     // unix time: /proc/stat btime + starttime over _SC_CLK_TCK
};

// Reads every field now.
ProcessStats ReadProcessStats();

// Registers process_resident_memory_bytes, process_virtual_memory_bytes, process_cpu_seconds_total,
// process_open_fds, process_max_fds and process_start_time_seconds as callbacks that read /proc when
// the registry is rendered (NaN for what cannot be read). The start time is read once, here.
void RegisterProcessMetrics(MetricsRegistry& registry);

// Registers layerpipe_build_info{version="<Version()>"} 1 (common/version.h).
void RegisterBuildInfo(MetricsRegistry& registry);

}  // namespace layerpipe

#endif  // LAYERPIPE_COMMON_PROCESS_METRICS_H_
