#include "cli/cli_util.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "backend/backend_factory.h"
#include "engine/model/quantize.h"

namespace layerpipe::cli {

int Fail(const std::string& command, const absl::Status& status) {
  std::fprintf(stderr, "layerpipe %s: %s\n", command.c_str(), std::string(status.message()).c_str());
  return absl::IsInvalidArgument(status) ? 2 : 1;
}

std::optional<Args> ParseOrExit(const std::string& command, const std::vector<std::string>& argv,
                                std::vector<FlagSpec> specs, int* exit_code) {
  specs.push_back({"help", true, false, "show this help"});
  auto args = Args::Parse(argv, specs);
  if (!args.ok()) {
    *exit_code = Fail(command, args.status());
    std::fputs(Usage(command, specs).c_str(), stderr);
    return std::nullopt;
  }
  if (args->Has("help")) {
    std::fputs(Usage(command, specs).c_str(), stdout);
    *exit_code = 0;
    return std::nullopt;
  }
  return *std::move(args);
}

std::vector<FlagSpec> SamplingFlagSpecs() {
  return {
      {"temperature", false, false, "0 (default) is greedy"},
      {"top-k", false, false, "keep the k most likely tokens (0: all)"},
      {"top-p", false, false, "nucleus sampling mass (default 1)"},
      {"min-p", false, false, "drop tokens below min-p times the best probability (default 0)"},
      {"repetition-penalty", false, false, "penalty for ids already present (default 1)"},
      {"seed", false, false, "sampling seed (default 0)"},
  };
}

std::vector<FlagSpec> EngineFlagSpecs() {
  return {{"precision", false, false, "bf16 (default, fast) or fp32 (activations and KV cache in fp32)"},
          {"threads", false, false, "compute threads (default: LAYERPIPE_THREADS or all cores)"},
          {"prefill-chunk", false, false, "prompt tokens per forward step (default 512)"},
          {"device", false, false, "where the layers run: cpu (default), cuda or cuda:N"},
          {"quantize", false, false,
           "none (default), int8 or int4: quantize every decoder layer's matrices at load (groups of 32 along k)"},
          {"quantize-head", false, false,
           "none (default) or int8: quantize the embedding / tied head at load too (the int8 rule)"}};
}

absl::StatusOr<EngineOptions> EngineOptionsFromArgs(const Args& args) {
  EngineOptions o;
  const std::string p = args.StringOr("precision", "bf16");
  if (!ParsePrecision(p, &o.precision)) {
    return absl::InvalidArgumentError(absl::StrCat("--precision must be bf16 or fp32, got \"", p, "\""));
  }
  auto threads = args.Int("threads", 0);
  if (!threads.ok()) return threads.status();
  if (*threads < 0 || *threads > 1024) return absl::InvalidArgumentError("--threads must be in [0, 1024]");
  o.threads = static_cast<int>(*threads);
  auto chunk = args.Int("prefill-chunk", 512);
  if (!chunk.ok()) return chunk.status();
  if (*chunk <= 0) return absl::InvalidArgumentError("--prefill-chunk must be positive");
  o.prefill_chunk = *chunk;
  auto quantize = ParseQuantization(args.StringOr("quantize", "none"));
  if (!quantize.ok()) return quantize.status();
  o.quantize = *quantize;
  auto quantize_head = ParseHeadQuantization(args.StringOr("quantize-head", "none"));
  if (!quantize_head.ok()) return quantize_head.status();
  o.quantize_head = *quantize_head;
  auto device = ParseDevice(args.StringOr("device", "cpu"));
  if (!device.ok()) return absl::InvalidArgumentError(absl::StrCat("--device: ", device.status().message()));
  auto maker = BackendMakerFor(*device);
  if (!maker.ok()) return absl::FailedPreconditionError(absl::StrCat("--device: ", maker.status().message()));
  o.make_backend = std::move(*maker);
  return o;
}

}  // namespace layerpipe::cli
