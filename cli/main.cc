// layerpipe: generation and scoring (local, or on a cluster with --coordinator), cluster jobs, a local
// cluster supervisor, tokenization and checkpoint generation.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/version.h"

namespace {

constexpr const char* kUsage =
    "usage: layerpipe COMMAND [flags]\n"
    "commands:\n"
    "  generate         stream generated text (local model, or a cluster with --coordinator)\n"
    "  score            logits of every position of --ids as .npy (or logprobs from --coordinator)\n"
    "  job              submit, follow, cancel and list generation jobs on a cluster\n"
    "  cluster          run workers and a coordinator on this machine (optionally one command, then stop)\n"
    "  tokenize         encode --text (or --decode ids) with a tokenizer.json\n"
    "  make-checkpoint  write a random checkpoint in the real Gemma 4 layout\n"
    "run 'layerpipe COMMAND --help' for the flags of a command, 'layerpipe --version' for the version\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "help") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "--version") {
    std::printf("%s\n", layerpipe::VersionLine("layerpipe").c_str());
    return 0;
  }
  std::vector<std::string> rest(argv + 2, argv + argc);
  if (cmd == "generate") return layerpipe::cli::RunGenerate(rest);
  if (cmd == "score") return layerpipe::cli::RunScore(rest);
  if (cmd == "tokenize") return layerpipe::cli::RunTokenize(rest);
  if (cmd == "job") return layerpipe::cli::RunJob(rest);
  if (cmd == "cluster") return layerpipe::cli::RunCluster(rest);
  if (cmd == "make-checkpoint") return layerpipe::cli::RunMakeCheckpoint(rest);
  std::fprintf(stderr, "layerpipe: unknown command \"%s\"\n%s", cmd.c_str(), kUsage);
  return 2;
}
