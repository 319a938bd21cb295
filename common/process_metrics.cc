#include "common/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/version.h"

namespace layerpipe {
namespace {

std::optional<std::string> ReadFile(const char* path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return std::nullopt;
  return text;
}

double PageSize() {
  const long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<double>(page) : 4096.0;
}

double ClockTicks() {
  const long ticks = sysconf(_SC_CLK_TCK);
  return ticks > 0 ? static_cast<double>(ticks) : 100.0;
}

// The fields of /proc/self/stat after "(comm)": [0] is field 3 (state), so field N is [N - 3]. The
// command name may hold spaces and parentheses, hence the split at the last ')'.
std::vector<std::string> StatFields() {
  const std::optional<std::string> text = ReadFile("/proc/self/stat");
  if (!text) return {};
  const size_t close = text->rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream in(text->substr(close + 1));
  return {std::istream_iterator<std::string>(in), std::istream_iterator<std::string>()};
}

std::optional<double> Number(const std::string& s) {
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    if (used != s.size()) return std::nullopt;
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

constexpr size_t kUtime = 14 - 3;
constexpr size_t kStime = 15 - 3;
constexpr size_t kStarttime = 22 - 3;

std::optional<double> CpuSeconds() {
  const std::vector<std::string> f = StatFields();
  if (f.size() <= kStime) return std::nullopt;
  const std::optional<double> utime = Number(f[kUtime]);
  const std::optional<double> stime = Number(f[kStime]);
  if (!utime || !stime) return std::nullopt;
  return (*utime + *stime) / ClockTicks();
}

// {size, resident} in bytes.
std::optional<std::pair<double, double>> Statm() {
  const std::optional<std::string> text = ReadFile("/proc/self/statm");
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  double size = 0;
  double resident = 0;
  if (!(in >> size >> resident)) return std::nullopt;
  const double page = PageSize();
  return std::make_pair(size * page, resident * page);
}

std::optional<double> OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  double n = 0;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;  // skips "." and ".."; the directory's own descriptor counts
  }
  closedir(dir);
  return n;
}

std::optional<double> MaxFds() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return std::nullopt;
  if (limit.rlim_cur == RLIM_INFINITY) return std::numeric_limits<double>::infinity();
  return static_cast<double>(limit.rlim_cur);
}

std::optional<double> StartTimeSeconds() {
  const std::vector<std::string> f = StatFields();
  if (f.size() <= kStarttime) return std::nullopt;
  const std::optional<double> start_ticks = Number(f[kStarttime]);
  const std::optional<std::string> stat = ReadFile("/proc/stat");
  if (!start_ticks || !stat) return std::nullopt;
  std::istringstream in(*stat);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("btime ", 0) != 0) continue;
    const std::optional<double> boot = Number(line.substr(6));
    if (!boot) return std::nullopt;
    return *boot + *start_ticks / ClockTicks();
  }
  return std::nullopt;
}

double OrNaN(const std::optional<double>& v) { return v ? *v : std::nan(""); }

}  // namespace

ProcessStats ReadProcessStats() {
  ProcessStats s;
  if (const auto m = Statm()) {
    s.virtual_memory_bytes = m->first;
    s.resident_memory_bytes = m->second;
  }
  s.cpu_seconds = CpuSeconds();
  s.open_fds = OpenFds();
  s.max_fds = MaxFds();
  s.start_time_seconds = StartTimeSeconds();
  return s;
}

void RegisterProcessMetrics(MetricsRegistry& registry) {
  registry.AddCallback("process_resident_memory_bytes", "Resident memory size in bytes.", MetricType::kGauge, {},
                       [] {
                         const auto m = Statm();
                         return m ? m->second : std::nan("");
                       });
  registry.AddCallback("process_virtual_memory_bytes", "Virtual memory size in bytes.", MetricType::kGauge, {}, [] {
    const auto m = Statm();
    return m ? m->first : std::nan("");
  });
  registry.AddCallback("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                       MetricType::kCounter, {}, [] { return OrNaN(CpuSeconds()); });
  registry.AddCallback("process_open_fds", "Number of open file descriptors.", MetricType::kGauge, {},
                       [] { return OrNaN(OpenFds()); });
  registry.AddCallback("process_max_fds", "Maximum number of open file descriptors.", MetricType::kGauge, {},
                       [] { return OrNaN(MaxFds()); });
  // Fixed for the process's life: read once. Where /proc says nothing, the time of this call.
  std::optional<double> start = StartTimeSeconds();
  if (!start) {
    start = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  const double start_time = *start;
  registry.AddCallback("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
                       MetricType::kGauge, {}, [start_time] { return start_time; });
}

void RegisterBuildInfo(MetricsRegistry& registry) {
  registry.GetGauge("layerpipe_build_info", "Always 1: the version this server was built from.",
                    {{"version", Version()}})
      .Set(1);
}

}  // namespace layerpipe
