#include "common/server_flags.h"

#include <cstdio>
#include <cstdlib>
#include <map>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "common/dash_flags.h"
#include "common/version.h"

// The source folder, as the compiler saw __FILE__ in every ABSL_FLAG (common/CMakeLists.txt).
#ifndef LAYERPIPE_SOURCE_DIR
#define LAYERPIPE_SOURCE_DIR ""
#endif

namespace layerpipe {
namespace {

// absl hands every filter the flag's file as the compiler named it (absolute here: CMake compiles
// absolute paths), less its leading slashes.
absl::string_view SourceDir() {
  absl::string_view dir = LAYERPIPE_SOURCE_DIR;
  while (absl::ConsumePrefix(&dir, "/")) {
  }
  return dir;
}

// A flag defined by this project rather than by absl itself.
bool IsProjectFile(absl::string_view file) {
  while (absl::ConsumePrefix(&file, "/")) {
  }
  if (SourceDir().empty()) return !absl::StrContains(file, "absl/");
  return absl::ConsumePrefix(&file, SourceDir()) && absl::StartsWith(file, "/");
}

// worker/main.cc rather than work/main/worker/main.cc.
std::string ShortFileName(absl::string_view file) {
  while (absl::ConsumePrefix(&file, "/")) {
  }
  if (!SourceDir().empty() && absl::ConsumePrefix(&file, SourceDir())) absl::ConsumePrefix(&file, "/");
  return std::string(file);
}

bool IsHelpOrVersion(const std::string& arg, const char* name) {
  return arg == absl::StrCat("--", name) || arg == absl::StrCat("-", name);
}

}  // namespace

std::string ServerFlagsHelp(absl::string_view usage) {
  // By file, then by name, as absl lists them.
  std::map<std::string, std::map<std::string, const absl::CommandLineFlag*>> by_file;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag->IsRetired() || !IsProjectFile(flag->Filename())) continue;
    by_file[ShortFileName(flag->Filename())][std::string(name)] = flag;
  }
  std::string out = absl::StrCat(usage, "\n\n");
  for (const auto& [file, flags] : by_file) {
    absl::StrAppend(&out, "  Flags from ", file, ":\n");
    for (const auto& [name, flag] : flags) {
      const std::string def = flag->IsOfType<std::string>() ? absl::StrCat("\"", flag->DefaultValue(), "\"")
                                                            : flag->DefaultValue();
      absl::StrAppend(&out, "    --", absl::StrReplaceAll(name, {{"_", "-"}}), " (", flag->Help(), "); default: ",
                      def, ";\n");
    }
    out += "\n";
  }
  out +=
      "Flag names take dashes or underscores alike (--kv-budget is --kv_budget); values follow as --flag=VALUE\n"
      "or --flag VALUE. --version prints the version; --helpfull also lists absl's own flags (--flagfile, ...).\n";
  return out;
}

void ParseServerFlags(std::vector<std::string> args, absl::string_view program, absl::string_view usage) {
  absl::SetProgramUsageMessage(usage);
  const std::string version = VersionLine(program);
  absl::FlagsUsageConfig config;
  config.contains_help_flags = IsProjectFile;
  config.contains_helpshort_flags = IsProjectFile;
  config.contains_helppackage_flags = IsProjectFile;
  config.version_string = [version] { return version + "\n"; };
  absl::SetFlagsUsageConfig(config);
  for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    if (IsHelpOrVersion(args[i], "help")) {
      std::fputs(ServerFlagsHelp(usage).c_str(), stdout);
      std::exit(0);
    }
    if (IsHelpOrVersion(args[i], "version")) {
      std::printf("%s\n", version.c_str());
      std::exit(0);
    }
  }
  std::vector<char*> raw = ArgPointers(args);
  std::vector<std::string> flags = DashesToUnderscores(static_cast<int>(raw.size()), raw.data());
  std::vector<char*> flag_ptrs = ArgPointers(flags);
  absl::ParseCommandLine(static_cast<int>(flag_ptrs.size()), flag_ptrs.data());
}

}  // namespace layerpipe
