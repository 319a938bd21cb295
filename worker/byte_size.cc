#include "worker/byte_size.h"

#include <unistd.h>

#include <cctype>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace layerpipe {

absl::StatusOr<int64_t> ParseByteSize(const std::string& text) {
  const auto bad = [&text] {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid size \"", text, "\": expected a positive integer with an optional K, M, G or T suffix"));
  };
  absl::string_view s = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
  if (digits == 0) return bad();
  uint64_t value = 0;
  if (!absl::SimpleAtoi(s.substr(0, digits), &value)) return bad();
  const std::string suffix = absl::AsciiStrToUpper(s.substr(digits));
  int shift = 0;
  if (!suffix.empty()) {
    const char unit = suffix[0];
    const std::string rest = suffix.substr(1);
    if (rest != "" && rest != "B" && rest != "IB") return bad();
    switch (unit) {
      case 'B': shift = 0; if (!rest.empty()) return bad(); break;
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      default: return bad();
    }
  }
  if (value == 0) return bad();
  if (value > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) >> shift)) {
    return absl::InvalidArgumentError(absl::StrCat("size \"", text, "\" is too large"));
  }
  return static_cast<int64_t>(value << shift);
}

absl::StatusOr<SizeOrShare> ParseSizeOrShare(const std::string& text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  SizeOrShare out;
  if (absl::ConsumeSuffix(&s, "%")) {
    double percent = 0;
    if (!absl::SimpleAtod(s, &percent) || !(percent >= 0 && percent <= 100)) {
      return absl::InvalidArgumentError(absl::StrCat("invalid share \"", text, "\": expected 0% to 100%"));
    }
    out.share = percent / 100;
    return out;
  }
  if (s == "0") return out;
  auto bytes = ParseByteSize(std::string(s));
  if (!bytes.ok()) return bytes.status();
  out.bytes = *bytes;
  return out;
}

int64_t DefaultKvBudgetBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return int64_t{1} << 30;  // unknown machine: a modest 1 GiB
  return static_cast<int64_t>(pages) * page / 2;
}

}  // namespace layerpipe
