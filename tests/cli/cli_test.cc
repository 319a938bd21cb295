// The layerpipe command end to end: its documented forms work, and bad arguments give a non-zero exit
// and a message saying what is wrong.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"

namespace {

struct Result {
  int code;
  std::string out;  // stdout
  std::string err;  // stderr
};

bool IsIntelCpu() { return __builtin_cpu_is("intel"); }

std::string Bin() {
  const char* b = std::getenv("LAYERPIPE_BIN");
  return std::string(b ? b : LAYERPIPE_BIN_DIR) + "/layerpipe";
}

// The real Gemma tokenizer.json (fetched by scripts/fetch_tokenizer.sh).
std::string TokenizerPath() {
  const char* t = std::getenv("LAYERPIPE_TOKENIZER");
  return t ? t : LAYERPIPE_TOKENIZER_PATH;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result RunCli(const std::string& args) {
  // ctest runs the tests of this binary as parallel processes: every call gets its own files.
  static int calls = 0;
  const std::string base = ::testing::TempDir() + "/cli_" + std::to_string(getpid()) + "_" + std::to_string(calls++);
  const std::string out = base + ".out", err = base + ".err";
  const std::string cmd = Bin() + " " + args + " >" + out + " 2>" + err + " </dev/null";
  int status = std::system(cmd.c_str());
  Result r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, Slurp(out), Slurp(err)};
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

void ExpectFails(const std::string& args, const std::string& message) {
  Result r = RunCli(args);
  EXPECT_NE(r.code, 0) << args;
  EXPECT_NE(r.err.find(message), std::string::npos) << args << "\nstderr: " << r.err;
}

class CliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new std::string(::testing::TempDir() + "/cli_model_" + std::to_string(getpid()));
    std::string flags = " --layers 3 --hidden 64 --intermediate 128 --heads 4 --head-dim 16 --kv-heads 2"
                        " --global-head-dim 32 --global-kv-heads 1 --window 4 --full-period 3 --seed 3 --max-positions 256";
    ASSERT_TRUE(std::filesystem::exists(TokenizerPath())) << TokenizerPath() << " is missing";
    flags += " --tokenizer " + TokenizerPath();
    Result r = RunCli("make-checkpoint --out " + *model_ + flags);
    ASSERT_EQ(r.code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*model_);
    delete model_;
  }
  static std::string* model_;
};
std::string* CliTest::model_ = nullptr;

TEST_F(CliTest, GenerateWithIdsPrintsIdsOnTheLastLine) {
  Result r = RunCli("generate --model " + *model_ + " --ids 2,105,300,400 --max-new-tokens 7 --print-ids --stop-ids 1");
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_FALSE(lines.empty());
  std::vector<std::string> ids = absl::StrSplit(lines.back(), ',');
  EXPECT_EQ(ids.size(), 7u) << r.out;
  // Greedy decoding is deterministic: a second run prints the same ids.
  Result again = RunCli("generate --model " + *model_ + " --ids 2,105,300,400 --max-new-tokens 7 --print-ids --stop-ids 1");
  EXPECT_EQ(again.out, r.out);
}

TEST_F(CliTest, SeededSamplingIsReproducible) {
  const std::string cmd = "generate --model " + *model_ +
                          " --ids 2,10,20 --max-new-tokens 12 --temperature 1.5 --top-k 40 --top-p 0.9 --print-ids"
                          " --stop-ids 1 --seed ";
  Result a = RunCli(cmd + "11"), b = RunCli(cmd + "11"), c = RunCli(cmd + "12");
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
}

TEST_F(CliTest, ScoreWritesAFloat32Npy) {
  const std::string out = ::testing::TempDir() + "/cli_logits_" + std::to_string(getpid()) + ".npy";
  Result r = RunCli("score --model " + *model_ + " --ids 2,5,6,7,8 --logits-out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  std::string npy = Slurp(out);
  ASSERT_GT(npy.size(), 128u);
  EXPECT_EQ(npy.substr(0, 6), "\x93NUMPY");
  EXPECT_NE(npy.find("'descr': '<f4'"), std::string::npos);
  const std::string vocab = "262144";
  EXPECT_NE(npy.find("'shape': (5, " + vocab + ")"), std::string::npos) << npy.substr(0, 128);
  const size_t header = 10 + static_cast<unsigned char>(npy[8]) + 256 * static_cast<unsigned char>(npy[9]);
  EXPECT_EQ(npy.size(), header + 5 * std::stoul(vocab) * 4);
}

// The line of stderr that holds `text` ("" if none).
std::string LineWith(const std::string& err, const std::string& text) {
  for (absl::string_view line : absl::StrSplit(err, '\n')) {
    if (line.find(text) != absl::string_view::npos) return std::string(line);
  }
  return "";
}

// The CPU stage says once which matmul kernel it runs; $LAYERPIPE_MATMUL_ISA naming none is a warning
// that says so (the best kernel runs: the same logits), not a silent fallback.
TEST_F(CliTest, CpuStageNamesItsKernelAndAnIgnoredRequest) {
  const std::string out = ::testing::TempDir() + "/cli_kernel_" + std::to_string(getpid()) + ".npy";
  const std::string score = "score --model " + *model_ + " --ids 2,5,6 --logits-out " + out;
  Result plain = RunCli(score);
  ASSERT_EQ(plain.code, 0) << plain.err;
  const std::string line = LineWith(plain.err, "] CPU stages: ");
  EXPECT_EQ(line.substr(0, 1), "I") << plain.err;
  EXPECT_NE(line.find(" threads, matmul kernel avx"), std::string::npos) << plain.err;
  EXPECT_EQ(line.find("ignored"), std::string::npos) << plain.err;
  const std::string logits = Slurp(out);

  setenv("LAYERPIPE_MATMUL_ISA", "avx9", 1);
  Result r = RunCli(score);
  unsetenv("LAYERPIPE_MATMUL_ISA");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string warning = LineWith(r.err, "] CPU stages: ");
  EXPECT_EQ(warning.substr(0, 1), "W") << r.err;
  EXPECT_NE(warning.find("LAYERPIPE_MATMUL_ISA=avx9 ignored: not one of avx2, avx512f, avx512bf16"), std::string::npos)
      << r.err;
  EXPECT_EQ(Slurp(out), logits);
  std::filesystem::remove(out);
}

// $LAYERPIPE_ASSUME_AVX512_BF16 is a request the line answers: granted only where vdpbf16ps ran (then
// the line says so and BF16 is "yes"), a warning naming why where it was set aside, nothing where CPUID
// shows BF16 anyway; a value other than 1 or 0 is a warning. The logits stay the default kernel's
// where it does not make avx512bf16 the default kernel, which it does only off Intel CPUs.
TEST_F(CliTest, AssumingAvx512Bf16IsGrantedOnlyWhereItRuns) {
  const std::string out = ::testing::TempDir() + "/cli_assume_" + std::to_string(getpid());
  auto score = [&](const std::string& name) {
    return "score --model " + *model_ + " --ids 2,5,6 --logits-out " + out + name + ".npy";
  };
  unsetenv("LAYERPIPE_ASSUME_AVX512_BF16");  // "plain" is CPUID's word alone
  Result plain = RunCli(score("plain"));
  ASSERT_EQ(plain.code, 0) << plain.err;
  const std::string plain_line = LineWith(plain.err, "] CPU stages: ");
  const bool cpuid_bf16 = plain_line.find("AVX-512 BF16 yes") != std::string::npos;
  const bool avx512f = plain_line.find("AVX-512 F yes") != std::string::npos;

  setenv("LAYERPIPE_ASSUME_AVX512_BF16", "yes", 1);
  Result bad = RunCli(score("bad"));
  setenv("LAYERPIPE_ASSUME_AVX512_BF16", "1", 1);
  Result asked = RunCli(score("asked"));
  unsetenv("LAYERPIPE_ASSUME_AVX512_BF16");
  ASSERT_EQ(bad.code, 0) << bad.err;
  ASSERT_EQ(asked.code, 0) << asked.err;
  const std::string bad_line = LineWith(bad.err, "] CPU stages: ");
  if (cpuid_bf16) {
    EXPECT_EQ(bad_line.find("LAYERPIPE_ASSUME"), std::string::npos) << bad.err;
  } else {
    EXPECT_EQ(bad_line.substr(0, 1), "W") << bad.err;
    EXPECT_NE(bad_line.find("LAYERPIPE_ASSUME_AVX512_BF16=yes ignored: not 1 or 0"), std::string::npos) << bad.err;
  }
  const std::string line = LineWith(asked.err, "] CPU stages: ");
  const std::string assumed = "AVX-512 BF16 assumed (LAYERPIPE_ASSUME_AVX512_BF16=1): CPUID hides it, vdpbf16ps ran";
  const bool granted = line.find(assumed) != std::string::npos;
  if (cpuid_bf16) {
    EXPECT_EQ(line.find("LAYERPIPE_ASSUME"), std::string::npos) << asked.err;
  } else if (granted) {
    EXPECT_EQ(line.substr(0, 1), "I") << asked.err;
    EXPECT_NE(line.find("AVX-512 BF16 yes"), std::string::npos) << asked.err;
  } else {
    EXPECT_EQ(line.substr(0, 1), "W") << asked.err;
    EXPECT_NE(line.find(avx512f ? "LAYERPIPE_ASSUME_AVX512_BF16=1 ignored: vdpbf16ps does not run here"
                                : "LAYERPIPE_ASSUME_AVX512_BF16=1 ignored: this CPU lacks AVX-512 F/BW/VL"),
              std::string::npos)
        << asked.err;
  }
  const std::string kernel = " matmul kernel avx512bf16 ";
  const bool bf16_default = plain_line.find(kernel) != std::string::npos || (granted && !IsIntelCpu());
  EXPECT_EQ(line.find(kernel) != std::string::npos, bf16_default)
      << "avx512bf16 is the default only off Intel CPUs:\n" << plain_line << "\n" << line;
  if (line.find(kernel) == std::string::npos) EXPECT_EQ(Slurp(out + "asked.npy"), Slurp(out + "plain.npy"));
  for (const char* name : {"plain", "bad", "asked"}) std::filesystem::remove(out + name + ".npy");
}

// Prefill's two ways of widening the weights (24 tokens: more rows than decode's tiles take) give the
// same logits, the line names the one it runs, and a value naming neither is a warning.
TEST_F(CliTest, PrefillWideningsGiveTheSameLogits) {
  const std::string out = ::testing::TempDir() + "/cli_widen_" + std::to_string(getpid()) + ".npy";
  std::string ids = "2";
  for (int i = 0; i < 23; ++i) ids += "," + std::to_string(5 + 7 * i);
  const std::string score = "score --model " + *model_ + " --ids " + ids + " --logits-out " + out;
  std::vector<std::string> logits;
  for (const char* widening : {"registers", "block", "sideways"}) {
    setenv("LAYERPIPE_MATMUL_WIDEN", widening, 1);
    Result r = RunCli(score);
    unsetenv("LAYERPIPE_MATMUL_WIDEN");
    ASSERT_EQ(r.code, 0) << r.err;
    const std::string line = LineWith(r.err, "] CPU stages: ");
    if (std::string(widening) == "sideways") {
      EXPECT_EQ(line.substr(0, 1), "W") << r.err;
      EXPECT_NE(line.find("LAYERPIPE_MATMUL_WIDEN=sideways ignored: not one of registers, block"), std::string::npos)
          << r.err;
    } else {
      EXPECT_EQ(line.substr(0, 1), "I") << r.err;
      EXPECT_NE(line.find(std::string("prefill widening ") + widening), std::string::npos) << r.err;
    }
    logits.push_back(Slurp(out));
    ASSERT_FALSE(logits.back().empty());
  }
  EXPECT_EQ(logits[1], logits[0]);
  EXPECT_EQ(logits[2], logits[0]);
  std::filesystem::remove(out);
}

TEST_F(CliTest, PromptStreamingMatchesTheDecodedIds) {
  const std::string tok = TokenizerPath();
  Result r = RunCli("generate --model " + *model_ + " --chat --prompt 'Hello there' --max-new-tokens 10 --print-ids"
                 " --stop-ids 1");
  ASSERT_EQ(r.code, 0) << r.err;
  // stdout: streamed text, a newline, then the ids line.
  const size_t last_nl = r.out.rfind('\n', r.out.size() - 2);
  ASSERT_NE(last_nl, std::string::npos);
  const std::string text = r.out.substr(0, last_nl);
  const std::string ids = r.out.substr(last_nl + 1, r.out.size() - last_nl - 2);
  Result dec = RunCli("tokenize --tokenizer " + tok + " --skip-special=true --decode " + ids);
  ASSERT_EQ(dec.code, 0) << dec.err;
  EXPECT_EQ(text + "\n", dec.out);
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name + "_" + std::to_string(getpid());
  std::ofstream(path) << text;
  return path;
}

TEST_F(CliTest, MessagesFileIsAMultiTurnChat) {
  const std::string m = " --model " + *model_ + " --max-new-tokens 6 --print-ids --stop-ids 1";
  // One user message (content as parts) is the --chat --prompt request, token for token.
  const std::string one = WriteTemp("one.json", R"([{"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]}])");
  Result a = RunCli("generate" + m + " --messages " + one);
  Result b = RunCli("generate" + m + " --chat --system 'Be brief.' --prompt 'Hello there'");
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  // <bos> + system turn (8) + user turn (7) + the generation prompt (7).
  EXPECT_NE(a.err.find("[23 prompt tokens"), std::string::npos) << a.err;
  // An earlier answer makes the prompt longer (its thinking does not).
  const std::string three = WriteTemp("three.json", R"([{"role": "user", "content": "Hello there"},
      {"role": "assistant", "content": "<|channel>thought\nlong thinking here<channel|>Hi"},
      {"role": "user", "content": "Again"}])");
  Result c = RunCli("generate" + m + " --messages " + three);
  ASSERT_EQ(c.code, 0) << c.err;
  // <bos> + user turn (7) + <|turn>model\nHi<turn|>\n (6) + user turn (6) + the generation prompt (7).
  EXPECT_NE(c.err.find("[27 prompt tokens"), std::string::npos) << c.err;
  ExpectFails("generate" + m + " --messages " + WriteTemp("bad_role.json", R"([{"role": "tool", "content": "x"}])"),
              "messages[0]: unknown role \"tool\"");
  ExpectFails("generate" + m + " --messages " + WriteTemp("bad_json.json", "[{"), "not valid JSON");
  ExpectFails("generate" + m + " --messages /nonexistent.json", "cannot read the messages file /nonexistent.json");
  ExpectFails("generate" + m + " --messages " + one + " --chat", "--chat needs --prompt");
}

TEST_F(CliTest, BadAttachmentsAreNamed) {
  const std::string m = " --model " + *model_;
  const std::string gif = ::testing::TempDir() + "/cli_not_an_image_" + std::to_string(getpid()) + ".gif";
  std::ofstream(gif, std::ios::binary) << "GIF89a\x01\x00\x01\x00";
  ExpectFails("generate" + m + " --prompt 'see <|image|>' --image /nonexistent.png --max-new-tokens 2",
              "--image /nonexistent.png: cannot open");
  ExpectFails("generate" + m + " --prompt 'see <|image|>' --image " + gif + " --max-new-tokens 2",
              "--image " + gif + ": ");
  ExpectFails("score" + m + " --ids 2,258881,258881 --audio " + gif + " --logits-out /tmp/x.npy", "--audio " + gif + ": ");
  ExpectFails("generate" + m + " --ids 2,258880,258880 --max-new-tokens 2",
              "more runs of id 258880 than the 0 images given");
  ExpectFails("tokenize --tokenizer " + TokenizerPath() + " --text 'a <|image|>' --image " + gif,
              "--image and --audio need --model");
  ExpectFails("tokenize" + m + " --text 'no placeholder'  --audio " + gif, "--audio " + gif + ": ");
  std::filesystem::remove(gif);
}

TEST_F(CliTest, BadArgumentsGiveAnErrorAndNonZeroExit) {
  const std::string m = " --model " + *model_;
  ExpectFails("", "usage");
  ExpectFails("frobnicate", "unknown command");
  ExpectFails("generate --ids 2,3 --max-new-tokens 3", "missing required flag --model");
  ExpectFails("generate" + m + " --ids 2,3", "--max-new-tokens");
  ExpectFails("generate" + m + " --ids 2,3 --max-new-tokens 0", "--max-new-tokens must be positive");
  ExpectFails("generate" + m + " --ids 2,x --max-new-tokens 3", "\"x\" is not a non-negative token id");
  ExpectFails("generate" + m + " --ids 2,99999999 --max-new-tokens 3", "outside the vocabulary");
  ExpectFails("generate" + m + " --ids 2,3 --max-new-tokens 3 --temperature -1", "temperature");
  ExpectFails("generate" + m + " --ids 2,3 --max-new-tokens 3 --temperature nan", "--temperature must be a number");
  ExpectFails("generate" + m + " --ids 2,3 --max-new-tokens 3 --top-p 1.5", "top_p");
  ExpectFails("generate" + m + " --ids 2,3 --max-new-tokens 3 --top-k -2", "--top-k");
  ExpectFails("generate" + m + " --ids 2,3 --max-new-tokens 5000", "exceeds the context");
  ExpectFails("generate" + m + " --ids 2,3 --prompt hi --max-new-tokens 3", "exactly one of --prompt, --ids and --messages");
  ExpectFails("generate" + m + " --ids 2,3 --max-new-tokens 3 --bogus 1", "unknown flag --bogus");
  ExpectFails("generate" + m + " --ids 2,3 --max-new-tokens 3 --precision fp16", "--precision must be bf16 or fp32");
  ExpectFails("generate --model /nonexistent --ids 2,3 --max-new-tokens 3", "/nonexistent/config.json");
  ExpectFails("generate" + m + " --ids 2,3 --max-new-tokens 3 --device gpu", "not one of cpu, cuda, cuda:N");
  // A device index no machine has: refused whether or not this build has the CUDA backend.
  ExpectFails("generate" + m + " --ids 2,3 --max-new-tokens 3 --device cuda:4096", "--device: device cuda:4096");
  ExpectFails("cluster" + m + " --workers 3 --device cpu,cpu", "--device lists 2 devices for 3 workers");
  ExpectFails("cluster" + m + " --workers 2 --device cpu,cuda:4096", "--device: device cuda:4096");
  ExpectFails("score" + m + " --ids 2,3", "--logits-out");
  ExpectFails("score" + m + " --ids , --logits-out /tmp/x.npy", "--ids has no ids");
  ExpectFails("make-checkpoint --out /tmp/x --layers many", "--layers must be an integer");
  ExpectFails("make-checkpoint --out /tmp/x --layers 2 --heads 4 --kv-heads 3", "num_key_value_heads");
  ExpectFails("make-checkpoint --out /tmp/x --layer-types s,q", "\"q\" is not s(liding) or f(ull)");
  ExpectFails("tokenize --text hi", "exactly one of --tokenizer and --model");
  ExpectFails("tokenize --tokenizer /nonexistent.json --text hi", "/nonexistent.json");
}

}  // namespace
