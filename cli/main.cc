// layerpipe: local generation, scoring, tokenization and checkpoint generation.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace {

constexpr const char* kUsage =
    "usage: layerpipe COMMAND [flags]\n"
    "commands:\n"
    "  generate         run the model locally and stream generated text\n"
    "  score            write the logits of every position of --ids to a .npy file\n"
    "  tokenize         encode --text (or --decode ids) with a tokenizer.json\n"
    "  make-checkpoint  write a random checkpoint in the real Gemma 4 layout\n"
    "run 'layerpipe COMMAND --help' for the flags of a command\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "help") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  std::vector<std::string> rest(argv + 2, argv + argc);
  if (cmd == "generate") return layerpipe::cli::RunGenerate(rest);
  if (cmd == "score") return layerpipe::cli::RunScore(rest);
  if (cmd == "tokenize") return layerpipe::cli::RunTokenize(rest);
  if (cmd == "make-checkpoint") return layerpipe::cli::RunMakeCheckpoint(rest);
  std::fprintf(stderr, "layerpipe: unknown command \"%s\"\n%s", cmd.c_str(), kUsage);
  return 2;
}
