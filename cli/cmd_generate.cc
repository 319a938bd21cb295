#include <cstdio>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/remote_client.h"
#include "cli/remote_commands.h"
#include "cli/remote_request.h"
#include "cli/media_inputs.h"
#include "engine/tokenizer/chat_format.h"
#include "engine/tokenizer/chat_messages_json.h"
#include "engine/generate.h"
#include "engine/tokenizer/tokenizer.h"

namespace layerpipe::cli {
namespace {

std::vector<FlagSpec> Specs() {
  std::vector<FlagSpec> s = {
      {"model", false, false, "checkpoint directory (config.json, safetensors, tokenizer.json)"},
      {"prompt", false, false, "prompt text"},
      {"chat", true, false, "wrap --prompt in the chat format of the -it model"},
      {"system", false, false, "system turn for --chat"},
      {"ids", false, false, "prompt token ids, comma-separated (instead of --prompt)"},
      {"messages", false, false, "a multi-turn chat: a JSON file with an array of {role, content} (instead of --prompt)"},
      {"tokenizer", false, false, "tokenizer.json (default: MODEL/tokenizer.json)"},
      {"max-new-tokens", false, false, "tokens to generate at most (required)"},
      {"stop", false, true, "stop string (repeatable)"},
      {"stop-ids", false, false, "stop ids, comma-separated (default: generation_config.json, else 1,106,50)"},
      {"print-ids", true, false, "print the generated ids, comma-separated, as the last line"},
      {"coordinator", false, false, "HOST:PORT of a cluster coordinator: generate there (no --model)"},
      {"top-logprobs", false, false, "with --coordinator: report the K most likely ids per token on stderr"},
  };
  for (FlagSpec& f : MediaFlagSpecs()) s.push_back(f);
  for (FlagSpec& f : SamplingFlagSpecs()) s.push_back(f);
  for (FlagSpec& f : EngineFlagSpecs()) s.push_back(f);
  for (FlagSpec& f : ConnectionFlagSpecs()) s.push_back(f);
  return s;
}

int Run(const Args& args) {
  const std::string cmd = "generate";
  if (args.Has("coordinator")) return RunRemoteGenerate(args);
  if (auto st = RejectFlags(args, ConnectionFlagNames(), "needs --coordinator"); !st.ok()) return Fail(cmd, st);
  if (args.Has("top-logprobs")) return Fail(cmd, absl::InvalidArgumentError("--top-logprobs needs --coordinator"));
  auto model = args.String("model");
  if (!model.ok()) return Fail(cmd, model.status());
  if (auto st = CheckPromptFlags(args); !st.ok()) return Fail(cmd, st);
  GenerateRequest req;
  auto max_new = args.Int("max-new-tokens");
  if (!max_new.ok()) return Fail(cmd, max_new.status());
  if (*max_new <= 0) return Fail(cmd, absl::InvalidArgumentError("--max-new-tokens must be positive"));
  req.stop.max_new_tokens = static_cast<int>(std::min<int64_t>(*max_new, INT32_MAX));
  auto temperature = args.Double("temperature", 0.0);
  auto top_k = args.Int("top-k", 0);
  auto top_p = args.Double("top-p", 1.0);
  auto min_p = args.Double("min-p", 0.0);
  auto rep = args.Double("repetition-penalty", 1.0);
  auto seed = args.Int("seed", 0);
  for (const absl::Status& st : {temperature.status(), top_k.status(), top_p.status(), min_p.status(),
                                 rep.status(), seed.status()}) {
    if (!st.ok()) return Fail(cmd, st);
  }
  if (*top_k < 0 || *top_k > INT32_MAX) return Fail(cmd, absl::InvalidArgumentError("--top-k must be >= 0"));
  req.sampling = {static_cast<float>(*temperature), static_cast<int>(*top_k), static_cast<float>(*top_p),
                  static_cast<float>(*min_p), static_cast<float>(*rep), static_cast<uint64_t>(*seed)};
  if (auto st = ValidateSamplingParams(req.sampling); !st.ok()) return Fail(cmd, st);
  auto engine_opts = EngineOptionsFromArgs(args);
  if (!engine_opts.ok()) return Fail(cmd, engine_opts.status());

  // The tokenizer is needed for text in or out; with --ids and no tokenizer only ids are printed.
  std::unique_ptr<Tokenizer> tokenizer;
  const std::string tok_path = args.StringOr("tokenizer", *model + "/tokenizer.json");
  if (args.Has("prompt") || args.Has("messages") || args.Has("tokenizer") || args.Has("stop") || std::filesystem::exists(tok_path)) {
    auto t = Tokenizer::Load(tok_path);
    if (!t.ok()) return Fail(cmd, t.status());
    tokenizer = std::move(*t);
  }
  if (args.Has("stop-ids")) {
    auto ids = args.Ids("stop-ids");
    if (!ids.ok()) return Fail(cmd, ids.status());
    req.stop.stop_ids = *ids;
  } else {
    auto ids = ReadStopIdsFromGenerationConfig(*model + "/generation_config.json");
    if (!ids.ok()) return Fail(cmd, ids.status());
    req.stop.stop_ids = *ids;
  }
  req.stop.stop_strings = args.All("stop");
  auto config = LoadModelConfig(*model);
  if (!config.ok()) return Fail(cmd, config.status());
  auto media = LoadLocalMedia(args, *config);
  if (!media.ok()) return Fail(cmd, media.status());
  SoftTokenExpander expander = media->Expander();
  if (args.Has("messages")) {
    auto messages = ReadChatMessagesFile(args.StringOr("messages", ""));
    if (!messages.ok()) return Fail(cmd, messages.status());
    auto ids = BuildChatConversation(*tokenizer, *messages, &expander);
    if (!ids.ok()) return Fail(cmd, ids.status());
    req.prompt = *std::move(ids);
  } else if (args.Has("prompt")) {
    auto text = args.String("prompt");
    if (args.Has("chat")) {
      req.prompt = BuildChatPrompt(*tokenizer, *text, args.StringOr("system", ""), &expander);
    } else {
      req.prompt = expander.EncodePrompt(*tokenizer, *text, /*add_bos=*/true);
    }
  } else {
    auto ids = args.Ids("ids");
    if (!ids.ok()) return Fail(cmd, ids.status());
    req.prompt = *ids;
  }
  if (args.Has("prompt") || args.Has("messages")) {
    if (auto st = expander.Finish(); !st.ok()) return Fail(cmd, st);
  }
  auto spans = media->Spans(req.prompt);
  if (!spans.ok()) return Fail(cmd, spans.status());
  req.soft = *std::move(spans);

  auto engine = Engine::Load(*model, *engine_opts);
  if (!engine.ok()) return Fail(cmd, engine.status());
  auto result = Generate(**engine, tokenizer.get(), req, [](std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  });
  if (!result.ok()) return Fail(cmd, result.status());
  std::fputc('\n', stdout);
  if (args.Has("print-ids")) std::printf("%s\n", absl::StrJoin(result->ids, ",").c_str());
  std::fflush(stdout);
  const double decode_tokens = static_cast<double>(result->ids.size()) - 1;
  std::fprintf(stderr, "[%zu prompt tokens, %zu generated, finish=%s, prefill %.1f tok/s, decode %.2f tok/s]\n",
               req.prompt.size(), result->ids.size(), result->finish_reason.c_str(),
               req.prompt.size() / std::max(result->prefill_seconds, 1e-9),
               decode_tokens > 0 ? decode_tokens / std::max(result->decode_seconds, 1e-9) : 0.0);
  return 0;
}

}  // namespace

int RunGenerate(const std::vector<std::string>& argv) {
  int code = 0;
  auto args = ParseOrExit("generate", argv, Specs(), &code);
  return args ? Run(*args) : code;
}

}  // namespace layerpipe::cli
