// libFuzzer target: client request validation. The input is a serialized layerpipe.v1.GenerateRequest,
// as the coordinator's Generate and SubmitJob receive it.
//
// LayerPipeService::BuildGenerate (coordinator/api_service.cc), which validates a request, is private,
// and the service cannot be built without a Pipeline, so this target repeats its steps with the same
// library calls, in the same order: the prompt's length against the context (CheckTextLength, with
// MaxTokenBytes), the prompt (Tokenizer::Encode with <bos>, or BuildChatPrompt) or the ids checked against
// the vocabulary, max_new_tokens and the context, top_logprobs, ToSamplingParams
// and ValidateSamplingParams, then the StopConfig and the TextStream the request streams through. Keep
// it in step with BuildGenerate. The tokenizer is the tiny Gemma-like one of the tokenizer_json_fuzz
// corpus (tiny_gemma.json; LAYERPIPE_FUZZ_TOKENIZER overrides the path).
//
// Checked on every accepted request: a text prompt has at least bytes / MaxTokenBytes tokens (what
// CheckTextLength relies on); a Sampler built from its parameters samples ids in range and a
// distribution that sums to 1; streaming its prompt ids back as if generated (then an end-of-turn id),
// the text shown never contains a stop string, a stop id stops at once, and the token budget stops at
// max_new_tokens.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/sampling/sampler.h"
#include "engine/sampling/stop_conditions.h"
#include "engine/sampling/text_stream.h"
#include "engine/tokenizer/chat_format.h"
#include "engine/tokenizer/tokenizer.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/layerpipe.pb.h"
#include "proto/sampling_params.h"

namespace {

using layerpipe::StopChecker;

// The coordinator's limits (api_service.cc) and the model's context (the 12B's is 131072; smaller here
// so that the budget check is reachable with short inputs).
constexpr int kMaxTopLogprobs = 20;
constexpr int64_t kMaxPositions = 4096;

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "generate_request_fuzz: %s\n", what);
  std::abort();
}

const layerpipe::Tokenizer& Tiny() {
  static const std::unique_ptr<layerpipe::Tokenizer> tokenizer = [] {
    const char* env = std::getenv("LAYERPIPE_FUZZ_TOKENIZER");
    const std::string path = env != nullptr ? env : LAYERPIPE_FUZZ_TOKENIZER;
    auto loaded = layerpipe::Tokenizer::Load(path);
    if (!loaded.ok()) {
      std::fprintf(stderr, "generate_request_fuzz: %s\n", std::string(loaded.status().message()).c_str());
      std::abort();
    }
    return *std::move(loaded);
  }();
  return *tokenizer;
}

// api_service.cc's MaxTokenBytes: the longest spelling, the most input bytes one token stands for.
int64_t MaxTokenBytes(const layerpipe::Tokenizer& tok) {
  int64_t longest = 1;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    longest = std::max<int64_t>(longest, static_cast<int64_t>(tok.IdToToken(id).size()));
  }
  return longest;
}

struct Accepted {
  std::vector<int32_t> prompt;
  layerpipe::SamplingParams sampling;
  layerpipe::StopConfig stop;
};

// BuildGenerate's checks; false where it returns an error.
bool Validate(const layerpipe::v1::GenerateRequest& req, const layerpipe::Tokenizer& tok, Accepted* out) {
  const int64_t vocab = tok.vocab_size();
  switch (req.input_case()) {
    case layerpipe::v1::GenerateRequest::kPrompt:
      if (req.prompt().empty()) return false;
      {
        static const int64_t max_token_bytes = MaxTokenBytes(tok);
        const int64_t bytes = static_cast<int64_t>(req.prompt().size() + req.system().size());
        if (bytes / max_token_bytes > kMaxPositions) return false;  // CheckTextLength
        out->prompt = req.chat() ? layerpipe::BuildChatPrompt(tok, req.prompt(), req.system())
                                 : tok.Encode(req.prompt(), /*add_bos=*/true);
        // (BuildGenerate counts the system text also when chat is off, where it is not encoded.)
        const int64_t encoded = static_cast<int64_t>(req.prompt().size() + (req.chat() ? req.system().size() : 0));
        Check(static_cast<int64_t>(out->prompt.size()) >= encoded / max_token_bytes,
              "fewer tokens than bytes / MaxTokenBytes: CheckTextLength could refuse a prompt that fits");
      }
      break;
    case layerpipe::v1::GenerateRequest::kIds:
      if (req.chat()) return false;
      if (req.ids().ids().empty()) return false;
      for (int32_t id : req.ids().ids()) {
        if (id < 0 || id >= vocab) return false;
      }
      out->prompt.assign(req.ids().ids().begin(), req.ids().ids().end());
      break;
    default:
      return false;
  }
  if (req.max_new_tokens() <= 0) return false;
  if (static_cast<int64_t>(out->prompt.size()) + req.max_new_tokens() > kMaxPositions) return false;
  if (req.top_logprobs() < 0 || req.top_logprobs() > kMaxTopLogprobs) return false;
  out->sampling = layerpipe::ToSamplingParams(req.sampling());
  if (!layerpipe::ValidateSamplingParams(out->sampling).ok()) return false;
  out->stop.max_new_tokens = req.max_new_tokens();
  out->stop.stop_ids = req.stop_ids().empty() ? layerpipe::DefaultStopIds()
                                              : std::vector<int32_t>(req.stop_ids().begin(), req.stop_ids().end());
  for (const std::string& s : req.stop()) out->stop.stop_strings.push_back(s);
  return true;
}

}  // namespace

// Protobuf logs every string field that is not UTF-8; the parse fails all the same.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  layerpipe::v1::GenerateRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  const layerpipe::Tokenizer& tok = Tiny();
  Accepted a;
  if (!Validate(req, tok, &a)) return 0;
  const int vocab = tok.vocab_size();
  for (int32_t id : a.prompt) Check(id >= 0, "a negative prompt id");

  // The sampler the last stage builds from these parameters, on a row of the tiny vocabulary.
  layerpipe::Sampler sampler(a.sampling, vocab);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (int i = 0; i < vocab; ++i) logits[i] = static_cast<float>((i * 7919) % 23) * 0.5f - 4.0f;
  for (int step = 0; step < 3; ++step) {
    const int32_t token = sampler.Sample(logits, a.prompt);
    Check(token >= 0 && token < vocab, "Sample gave an id outside the vocabulary");
  }
  double mass = 0;
  for (const layerpipe::TokenProbability& p : sampler.Distribution(logits, a.prompt)) {
    Check(p.id >= 0 && p.id < vocab && p.probability >= 0, "a bad Distribution entry");
    mass += p.probability;
  }
  Check(std::fabs(mass - 1.0) < 1e-6, "Distribution does not sum to 1");

  // The request's text stream, fed its own prompt ids (at most 256) and then <turn|>.
  std::vector<std::string> stops;
  for (const std::string& s : a.stop.stop_strings) {
    if (!s.empty()) stops.push_back(s);
  }
  const std::vector<int32_t> stop_ids = a.stop.stop_ids;
  const int max_new = a.stop.max_new_tokens;
  layerpipe::TextStream stream(&tok, std::move(a.stop));
  std::vector<int32_t> generated(a.prompt.begin(), a.prompt.begin() + std::min<size_t>(a.prompt.size(), 256));
  generated.push_back(layerpipe::kTurnEndId);
  std::string shown;
  int pushed = 0;
  for (int32_t id : generated) {
    layerpipe::TextStream::Step step = stream.Push(id);
    ++pushed;
    shown += step.text;
    const bool is_stop_id = std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
    Check(!is_stop_id || step.reason == StopChecker::Reason::kStopId, "a stop id did not stop");
    if (step.reason == StopChecker::Reason::kMaxTokens) Check(pushed == max_new, "stopped before the budget");
    if (step.reason == StopChecker::Reason::kNone) Check(pushed < max_new, "went past the budget");
    if (step.reason != StopChecker::Reason::kNone) break;
  }
  for (const std::string& s : stops) Check(shown.find(s) == std::string::npos, "the shown text holds a stop string");
  return 0;
}
