#include "cli/args.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace layerpipe::cli {

absl::StatusOr<Args> Args::Parse(const std::vector<std::string>& argv, const std::vector<FlagSpec>& specs) {
  Args args;
  for (size_t i = 0; i < argv.size(); ++i) {
    absl::string_view a = argv[i];
    if (!absl::ConsumePrefix(&a, "--")) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", argv[i], "\" (flags start with --)"));
    }
    std::string name(a), value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& s : specs) {
      if (s.name == name) spec = &s;
    }
    if (spec == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    if (!has_value) {
      if (spec->is_bool) {
        value = "true";
      } else if (i + 1 < argv.size()) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
    }
    auto& slot = args.values_[name];
    if (!slot.empty() && !spec->repeated) {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " given more than once"));
    }
    slot.push_back(value);
  }
  return args;
}

absl::StatusOr<std::string> Args::String(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return absl::InvalidArgumentError(absl::StrCat("missing required flag --", name));
  return it->second.back();
}

std::string Args::StringOr(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second.back();
}

std::vector<std::string> Args::All(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

absl::StatusOr<int64_t> Args::Int(const std::string& name, std::optional<int64_t> def) const {
  auto it = values_.find(name);
  if (it == values_.end()) {
    if (def) return *def;
    return absl::InvalidArgumentError(absl::StrCat("missing required flag --", name));
  }
  int64_t v;
  if (!absl::SimpleAtoi(it->second.back(), &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " must be an integer, got \"", it->second.back(), "\""));
  }
  return v;
}

absl::StatusOr<double> Args::Double(const std::string& name, std::optional<double> def) const {
  auto it = values_.find(name);
  if (it == values_.end()) {
    if (def) return *def;
    return absl::InvalidArgumentError(absl::StrCat("missing required flag --", name));
  }
  double v;
  if (!absl::SimpleAtod(it->second.back(), &v) || std::isnan(v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " must be a number, got \"", it->second.back(), "\""));
  }
  return v;
}

absl::StatusOr<bool> Args::Bool(const std::string& name, bool def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  bool v;
  if (!absl::SimpleAtob(it->second.back(), &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " must be true or false, got \"", it->second.back(), "\""));
  }
  return v;
}

absl::StatusOr<std::vector<int32_t>> ParseIdList(const std::string& flag, const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v) || v < 0 || v > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": \"", part, "\" is not a non-negative token id"));
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " has no ids"));
  return ids;
}

absl::StatusOr<std::vector<int32_t>> Args::Ids(const std::string& name) const {
  auto s = String(name);
  if (!s.ok()) return s.status();
  return ParseIdList(name, *s);
}

std::string Usage(const std::string& command, const std::vector<FlagSpec>& specs) {
  std::string out = absl::StrCat("usage: layerpipe ", command, " [flags]\n");
  for (const FlagSpec& s : specs) absl::StrAppend(&out, "  --", s.name, s.is_bool ? "" : " VALUE", "  ", s.help, "\n");
  return out;
}

}  // namespace layerpipe::cli
