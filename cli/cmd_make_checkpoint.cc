#include <cstdio>

#include "absl/strings/str_split.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "tools/checkpoint/checkpoint_writer.h"

namespace layerpipe::cli {
namespace {

std::vector<FlagSpec> Specs() {
  return {
      {"out", false, false, "output directory"},
      {"layers", false, false, "decoder layers (default 48)"},
      {"hidden", false, false, "hidden size (default 3840)"},
      {"intermediate", false, false, "MLP size (default 15360)"},
      {"vocab", false, false, "vocabulary size (default 262144)"},
      {"heads", false, false, "query heads (default 16)"},
      {"head-dim", false, false, "sliding-layer head size (default 256)"},
      {"kv-heads", false, false, "sliding-layer KV heads (default 8)"},
      {"global-head-dim", false, false, "full-layer head size (default 512)"},
      {"global-kv-heads", false, false, "full-layer KV heads with --k-eq-v (default 1; without it full layers have --kv-heads)"},
      {"window", false, false, "sliding window (default 1024)"},
      {"full-period", false, false, "a full layer every P layers, at i % P == P-1 (default 6)"},
      {"layer-types", false, false, "explicit layer types, e.g. s,s,f (overrides --full-period)"},
      {"k-eq-v", false, false, "full layers without v_proj (default true)"},
      {"partial-rotary", false, false, "rotary fraction of full layers (default 0.25)"},
      {"rope-theta", false, false, "sliding-layer rotary base (default 10000)"},
      {"global-rope-theta", false, false, "full-layer rotary base (default 1000000)"},
      {"max-positions", false, false, "max_position_embeddings (default 262144)"},
      {"seed", false, false, "random seed (default 0)"},
      {"shards", false, false, "safetensors shards (1: a single model.safetensors; default by size)"},
      {"flat-config", true, false, "write a flat gemma4_unified_text config.json"},
      {"text-only", true, false,
       "leave out the vision embedder and audio projection (written by default when --vocab holds their ids)"},
      {"tokenizer", false, false, "tokenizer.json to copy into the checkpoint"},
      {"quantization", false, false,
       "none (bf16, default) or w4a16: decoder Linears packed int4 as Google's QAT checkpoint ships them"},
  };
}

int Run(const Args& args) {
  const std::string cmd = "make-checkpoint";
  auto out = args.String("out");
  if (!out.ok()) return Fail(cmd, out.status());
  RandomCheckpointOptions o;
  int64_t layers = o.layers, heads = o.heads, hd = o.head_dim, kv = o.kv_heads, ghd = o.global_head_dim,
          gkv = o.global_kv_heads, period = o.full_period, seed = 0, shards = 0;
  for (auto [name, dst] : std::initializer_list<std::pair<const char*, int64_t*>>{
           {"layers", &layers}, {"hidden", &o.hidden}, {"intermediate", &o.intermediate}, {"vocab", &o.vocab},
           {"heads", &heads}, {"head-dim", &hd}, {"kv-heads", &kv}, {"global-head-dim", &ghd},
           {"global-kv-heads", &gkv}, {"window", &o.window}, {"full-period", &period},
           {"max-positions", &o.max_positions}, {"seed", &seed}, {"shards", &shards}}) {
    auto v = args.Int(name, *dst);
    if (!v.ok()) return Fail(cmd, v.status());
    if (*v < 0 || *v > (int64_t{1} << 40)) {
      return Fail(cmd, absl::InvalidArgumentError(absl::StrCat("--", name, " must be non-negative")));
    }
    *dst = *v;
  }
  if (layers > 4096 || heads > 4096 || hd > 65536 || kv > 4096 || ghd > 65536 || gkv > 4096 || shards > 4096 ||
      period > 4096) {
    return Fail(cmd, absl::InvalidArgumentError("a size flag is out of range"));
  }
  o.layers = static_cast<int>(layers);
  o.heads = static_cast<int>(heads);
  o.head_dim = static_cast<int>(hd);
  o.kv_heads = static_cast<int>(kv);
  o.global_head_dim = static_cast<int>(ghd);
  o.global_kv_heads = static_cast<int>(gkv);
  o.full_period = static_cast<int>(period);
  o.seed = static_cast<uint64_t>(seed);
  o.shards = static_cast<int>(shards);
  auto kev = args.Bool("k-eq-v", true);
  auto partial = args.Double("partial-rotary", o.partial_rotary);
  auto theta = args.Double("rope-theta", o.rope_theta_sliding);
  auto gtheta = args.Double("global-rope-theta", o.rope_theta_full);
  for (const absl::Status& st : {kev.status(), partial.status(), theta.status(), gtheta.status()}) {
    if (!st.ok()) return Fail(cmd, st);
  }
  o.k_eq_v = *kev;
  o.partial_rotary = *partial;
  o.rope_theta_sliding = *theta;
  o.rope_theta_full = *gtheta;
  o.flat_config = args.Has("flat-config");
  o.text_only = args.Has("text-only");
  o.tokenizer_json = args.StringOr("tokenizer", "");
  if (auto st = ParseCheckpointQuantizationFlag(args.StringOr("quantization", "none"), &o); !st.ok()) {
    return Fail(cmd, st);
  }
  if (args.Has("layer-types")) {
    for (absl::string_view t : absl::StrSplit(*args.String("layer-types"), ',')) {
      if (t == "s" || t == "sliding" || t == "sliding_attention") {
        o.layer_types.push_back(LayerType::kSliding);
      } else if (t == "f" || t == "full" || t == "full_attention") {
        o.layer_types.push_back(LayerType::kFull);
      } else {
        return Fail(cmd, absl::InvalidArgumentError(absl::StrCat("--layer-types: \"", t,
                                                                 "\" is not s(liding) or f(ull)")));
      }
    }
    if (!args.Has("layers")) o.layers = static_cast<int>(o.layer_types.size());
  }
  if (auto st = WriteRandomCheckpoint(*out, o); !st.ok()) return Fail(cmd, st);
  std::printf("wrote a %d-layer checkpoint to %s\n", o.layers, out->c_str());
  return 0;
}

}  // namespace

int RunMakeCheckpoint(const std::vector<std::string>& argv) {
  int code = 0;
  auto args = ParseOrExit("make-checkpoint", argv, Specs(), &code);
  return args ? Run(*args) : code;
}

}  // namespace layerpipe::cli
