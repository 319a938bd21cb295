// Compares the C++ tokenizer with the reference answers written by reference_encode.js: encode ids with and
// without <bos>, Decode, and streaming detokenization, case by case. Prints the first differing cases in
// detail and a summary with load time and encode throughput; exits non-zero on any difference.
//
// usage: tokenizer_parity TOKENIZER_JSON EXPECTED_JSON
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace layerpipe {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

std::string HexToBytes(const std::string& hex) {
  std::string out;
  std::string digits;
  for (char c : hex) {
    if (c != ' ') digits.push_back(c);
  }
  for (size_t i = 0; i + 1 < digits.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(digits.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// Printable form for failure reports: control characters and non-UTF-8 bytes escaped, long text cut.
std::string Visible(std::string_view s, size_t limit = 160) {
  std::string out;
  for (size_t i = 0; i < s.size() && out.size() < limit; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (out.size() >= limit) out += "...";
  return out;
}

std::string IdsAround(const Tokenizer& tok, const std::vector<int32_t>& ids, size_t at) {
  std::string out;
  const size_t begin = at >= 3 ? at - 3 : 0;
  for (size_t i = begin; i < ids.size() && i < at + 4; ++i) {
    out += (i == at ? "[" : " ") + std::to_string(ids[i]) + ":'" + Visible(tok.IdToToken(ids[i]), 24) + "'" +
           (i == at ? "]" : "");
  }
  return out;
}

class Checker {
 public:
  explicit Checker(const Tokenizer& tok) : tok_(tok) {}

  void Ids(const std::string& name, std::string_view what, const std::vector<int32_t>& expected,
           const std::vector<int32_t>& got) {
    if (expected == got) return;
    size_t at = 0;
    while (at < expected.size() && at < got.size() && expected[at] == got[at]) ++at;
    Fail(name, std::string(what) + ": ids differ at index " + std::to_string(at) + " (expected " +
                   std::to_string(expected.size()) + " ids, got " + std::to_string(got.size()) + ")\n    expected " +
                   IdsAround(tok_, expected, at) + "\n    got      " + IdsAround(tok_, got, at));
  }

  void Text(const std::string& name, std::string_view what, const std::string& expected, const std::string& got) {
    if (expected == got) return;
    size_t at = 0;
    while (at < expected.size() && at < got.size() && expected[at] == got[at]) ++at;
    const size_t from = at >= 20 ? at - 20 : 0;
    Fail(name, std::string(what) + ": text differs at byte " + std::to_string(at) + "\n    expected '" +
                   Visible(std::string_view(expected).substr(from), 80) + "'\n    got      '" +
                   Visible(std::string_view(got).substr(from), 80) + "'");
  }

  void Decoding(const std::string& name, const std::vector<int32_t>& ids, const std::string& expected,
                const std::string& expected_skip) {
    for (bool skip : {false, true}) {
      const std::string& want = skip ? expected_skip : expected;
      Text(name, skip ? "Decode(skip_special)" : "Decode", want, tok_.Decode(ids, skip));
      StreamingDetokenizer stream(tok_, skip);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.Push(id);
      streamed += stream.Flush();
      Text(name, skip ? "streaming(skip_special)" : "streaming", want, streamed);
    }
  }

  int failures() const { return failures_; }

 private:
  void Fail(const std::string& name, const std::string& detail) {
    if (++failures_ <= 5) std::printf("MISMATCH in case '%s'\n  %s\n", name.c_str(), detail.c_str());
  }

  const Tokenizer& tok_;
  int failures_ = 0;
};

int Run(const std::string& tokenizer_path, const std::string& expected_path) {
  const auto load_start = Clock::now();
  absl::StatusOr<std::unique_ptr<Tokenizer>> loaded = Tokenizer::Load(tokenizer_path);
  const double load_seconds = Seconds(load_start);
  if (!loaded.ok()) {
    std::printf("cannot load tokenizer: %s\n", loaded.status().ToString().c_str());
    return 1;
  }
  const Tokenizer& tok = **loaded;

  std::ifstream file(expected_path);
  if (!file) {
    std::printf("cannot open reference answers '%s' (written by reference_encode.js)\n", expected_path.c_str());
    return 1;
  }
  std::stringstream text;
  text << file.rdbuf();
  nlohmann::json expected;
  try {
    expected = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    std::printf("reference answers '%s' are not JSON: %s\n", expected_path.c_str(), e.what());
    return 1;
  }

  Checker check(tok);
  if (expected["vocab_size"].get<int>() != tok.vocab_size()) {
    std::printf("vocab size: reference %d, C++ %d\n", expected["vocab_size"].get<int>(), tok.vocab_size());
    return 1;
  }

  size_t encode_cases = 0, tokens = 0, bytes = 0;
  double encode_seconds = 0;
  for (const nlohmann::json& c : expected["encode"]) {
    const std::string name = c["name"].get<std::string>();
    const std::string input =
        c.contains("hex") ? HexToBytes(c["hex"].get<std::string>()) : c["text"].get<std::string>();
    const auto ids_bos = c["ids_bos"].get<std::vector<int32_t>>();
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const auto start = Clock::now();
    const std::vector<int32_t> got_bos = tok.Encode(input, /*add_bos=*/true);
    const std::vector<int32_t> got = tok.Encode(input, /*add_bos=*/false);
    encode_seconds += Seconds(start);
    check.Ids(name, "Encode(add_bos=true)", ids_bos, got_bos);
    check.Ids(name, "Encode(add_bos=false)", ids, got);
    check.Decoding(name, ids_bos, c["decoded"].get<std::string>(), c["decoded_skip_special"].get<std::string>());
    ++encode_cases;
    tokens += ids.size();
    bytes += input.size();
  }
  size_t decode_cases = 0;
  for (const nlohmann::json& c : expected["decode"]) {
    check.Decoding(c["name"].get<std::string>(), c["ids"].get<std::vector<int32_t>>(), c["decoded"].get<std::string>(),
                   c["decoded_skip_special"].get<std::string>());
    ++decode_cases;
  }

  // Throughput on one long mixed-script input: corpus texts without markup glued to 100 KB.
  std::string big;
  for (const nlohmann::json& c : expected["encode"]) {
    if (c.contains("text") && c["text"].get<std::string>().find('<') == std::string::npos) {
      big += c["text"].get<std::string>();
    }
    if (big.size() > 100000) break;
  }
  while (big.size() < 100000) big += big;
  big.resize(100000);
  const auto big_start = Clock::now();
  const size_t big_tokens = tok.Encode(big, false).size();
  const double big_seconds = Seconds(big_start);

  std::printf("tokenizer parity: %zu encode cases (%zu bytes, %zu tokens), %zu decode cases, %d mismatches\n",
              encode_cases, bytes, tokens, decode_cases, check.failures());
  std::printf("load %.3f s; corpus encode (twice per case) %.3f s = %.2f MB/s; 100 KB -> %zu tokens in %.3f s\n",
              load_seconds, encode_seconds, 2.0 * bytes / 1e6 / encode_seconds, big_tokens, big_seconds);
  return check.failures() == 0 ? 0 : 1;
}

}  // namespace
}  // namespace layerpipe

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_JSON EXPECTED_JSON\n", argv[0]);
    return 2;
  }
  return layerpipe::Run(argv[1], argv[2]);
}
