#include <cstdio>

#include "absl/strings/str_join.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/media_inputs.h"
#include "engine/tokenizer/chat_format.h"
#include "engine/tokenizer/tokenizer.h"

namespace layerpipe::cli {
namespace {

std::vector<FlagSpec> Specs() {
  return {
      {"tokenizer", false, false, "tokenizer.json"},
      {"model", false, false, "checkpoint directory holding tokenizer.json (instead of --tokenizer)"},
      {"text", false, false, "text to encode; prints the ids as a JSON array on the last line"},
      {"decode", false, false, "ids to decode, comma-separated; prints the text"},
      {"add-bos", false, false, "prepend <bos> when encoding (default true)"},
      {"skip-special", false, false, "drop special tokens when decoding (default false)"},
      {"chat", true, false, "encode --text in the chat format of the -it model"},
      {"system", false, false, "system turn for --chat"},
      {"image", false, true, "with --model: an image attachment (repeatable); its <|image|> expands to its soft tokens"},
      {"audio", false, true, "with --model: a WAV attachment (repeatable); its <|audio|> expands to its soft tokens"},
  };
}

int Run(const Args& args) {
  const std::string cmd = "tokenize";
  if (args.Has("tokenizer") == args.Has("model")) {
    return Fail(cmd, absl::InvalidArgumentError("give exactly one of --tokenizer and --model"));
  }
  if (args.Has("text") == args.Has("decode")) {
    return Fail(cmd, absl::InvalidArgumentError("give exactly one of --text and --decode"));
  }
  const std::string path = args.Has("tokenizer") ? *args.String("tokenizer") : *args.String("model") + "/tokenizer.json";
  auto add_bos = args.Bool("add-bos", true);
  if (!add_bos.ok()) return Fail(cmd, add_bos.status());
  auto skip = args.Bool("skip-special", false);
  if (!skip.ok()) return Fail(cmd, skip.status());
  std::vector<int32_t> ids;
  if (args.Has("decode")) {
    auto parsed = args.Ids("decode");
    if (!parsed.ok()) return Fail(cmd, parsed.status());
    ids = *parsed;
  }
  auto tok = Tokenizer::Load(path);
  if (!tok.ok()) return Fail(cmd, tok.status());
  if (args.Has("decode")) {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] >= (*tok)->vocab_size()) {
        return Fail(cmd, absl::InvalidArgumentError(absl::StrCat("--decode: id ", ids[i], " at index ", i,
                                                                 " is outside the vocabulary of ",
                                                                 (*tok)->vocab_size())));
      }
    }
    std::printf("%s\n", (*tok)->Decode(ids, *skip).c_str());
    return 0;
  }
  if ((args.Has("image") || args.Has("audio")) && !args.Has("model")) {
    return Fail(cmd, absl::InvalidArgumentError("--image and --audio need --model (its config says how they expand)"));
  }
  ModelConfig config;  // a tokenizer alone knows no attachments
  if (args.Has("model")) {
    auto c = LoadModelConfig(*args.String("model"));
    if (!c.ok()) return Fail(cmd, c.status());
    config = *c;
  }
  auto media = LoadLocalMedia(args, config);
  if (!media.ok()) return Fail(cmd, media.status());
  SoftTokenExpander expander = media->Expander();
  const std::string text = *args.String("text");
  if (args.Has("chat")) {
    ids = BuildChatPrompt(**tok, text, args.StringOr("system", ""), &expander);
  } else {
    ids = expander.EncodePrompt(**tok, text, *add_bos);
  }
  if (auto st = expander.Finish(); !st.ok()) return Fail(cmd, st);
  std::printf("[%s]\n", absl::StrJoin(ids, ",").c_str());
  return 0;
}

}  // namespace

int RunTokenize(const std::vector<std::string>& argv) {
  int code = 0;
  auto args = ParseOrExit("tokenize", argv, Specs(), &code);
  return args ? Run(*args) : code;
}

}  // namespace layerpipe::cli
