#include <cstdio>

#include "cli/cli_util.h"
#include "cli/media_inputs.h"
#include "cli/commands.h"
#include "cli/npy.h"
#include "cli/remote_client.h"
#include "cli/remote_commands.h"
#include "cli/remote_request.h"

namespace layerpipe::cli {
namespace {

std::vector<FlagSpec> Specs() {
  std::vector<FlagSpec> s = {
      {"model", false, false, "checkpoint directory"},
      {"ids", false, false, "token ids, comma-separated"},
      {"logits-out", false, false, "output .npy: float32 [number of ids, vocab] softcapped logits"},
      {"coordinator", false, false,
       "HOST:PORT of a cluster coordinator: score there (no --model); without --logits-out prints logprobs"},
      {"text", false, false, "with --coordinator: text to score (the coordinator tokenizes it)"},
  };
  for (FlagSpec& f : MediaFlagSpecs()) s.push_back(f);
  for (FlagSpec& f : EngineFlagSpecs()) s.push_back(f);
  for (FlagSpec& f : ConnectionFlagSpecs()) s.push_back(f);
  return s;
}

int Run(const Args& args) {
  const std::string cmd = "score";
  if (args.Has("coordinator")) return RunRemoteScore(args);
  if (auto st = RejectFlags(args, ConnectionFlagNames(), "needs --coordinator"); !st.ok()) return Fail(cmd, st);
  if (args.Has("text")) return Fail(cmd, absl::InvalidArgumentError("--text needs --coordinator"));
  auto model = args.String("model");
  if (!model.ok()) return Fail(cmd, model.status());
  auto ids = args.Ids("ids");
  if (!ids.ok()) return Fail(cmd, ids.status());
  auto out = args.String("logits-out");
  if (!out.ok()) return Fail(cmd, out.status());
  auto opts = EngineOptionsFromArgs(args);
  if (!opts.ok()) return Fail(cmd, opts.status());
  auto config = LoadModelConfig(*model);
  if (!config.ok()) return Fail(cmd, config.status());
  auto media = LoadLocalMedia(args, *config);
  if (!media.ok()) return Fail(cmd, media.status());
  auto spans = media->Spans(*ids);
  if (!spans.ok()) return Fail(cmd, spans.status());
  auto engine = Engine::Load(*model, *opts);
  if (!engine.ok()) return Fail(cmd, engine.status());
  auto logits = (*engine)->Score(*ids, *spans);
  if (!logits.ok()) return Fail(cmd, logits.status());
  const int64_t n = static_cast<int64_t>(ids->size());
  if (auto st = WriteNpyF32(*out, {n, (*engine)->config().vocab_size}, logits->data()); !st.ok()) {
    return Fail(cmd, st);
  }
  std::printf("wrote logits [%lld, %lld] to %s\n", static_cast<long long>(n),
              static_cast<long long>((*engine)->config().vocab_size), out->c_str());
  return 0;
}

}  // namespace

int RunScore(const std::vector<std::string>& argv) {
  int code = 0;
  auto args = ParseOrExit("score", argv, Specs(), &code);
  return args ? Run(*args) : code;
}

}  // namespace layerpipe::cli
