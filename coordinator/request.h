// One client request as the coordinator tracks it: its tokens and where its KV stands in the pipeline.
// Every field after the constant part belongs to the pipeline (guarded by its private lock); what
// clients see is published into `events`, which has a lock of its own (request_events.h).
#ifndef LAYERPIPE_COORDINATOR_REQUEST_H_
#define LAYERPIPE_COORDINATOR_REQUEST_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/request_events.h"
#include "coordinator/scheduling/prefix_keys.h"
#include "engine/media/prompt_media.h"
#include "engine/model/soft_tokens.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/stop_conditions.h"
#include "engine/sampling/text_stream.h"
#include "engine/tokenizer/tokenizer.h"
#include "proto/layerpipe.pb.h"

namespace layerpipe {

struct PrefixEntry;  // scheduling/prefix_cache.h

enum class RequestKind { kGenerate, kScore };

struct Request {
  using Clock = std::chrono::steady_clock;

  // Set before Submit, constant after.
  uint64_t id = 0;
  RequestKind kind = RequestKind::kGenerate;
  std::string job_id;  // non-empty for jobs
  std::string owner;   // the client (token name) a job belongs to; empty: anyone may see it
  std::vector<int32_t> prompt;
  // The prompt's images and audio, prepared, kept to the end so that a replay embeds them again; `soft`
  // says which prompt rows they fill (and points into `media`).
  std::shared_ptr<const PromptMedia> media;
  std::vector<SoftSpan> soft;
  std::vector<PrefixCut> prefix_cuts;  // where the prefix cache may cut the prompt (Pipeline::Submit)
  SamplingParams sampling;
  v1::SamplingParams sampling_proto;
  int top_logprobs = 0;
  int max_new_tokens = 0;
  bool return_logits = false;
  std::optional<TextStream> text;  // ids -> streamed text, and when to stop
  Clock::time_point created = Clock::now();

  // Progress.
  RequestState state = RequestState::kQueued;
  int64_t fed = 0;    // positions the pipeline's KV holds (steps that came back)
  int64_t sent = 0;   // positions sent down the pipe (fed + those in flight)
  int in_flight = 0;  // steps carrying this sequence on their way through the pipeline
  bool cancel_requested = false;
  std::vector<int32_t> generated;
  std::string finish_reason;
  absl::Status error;
  std::vector<float> score_logprobs;  // for kScore: log p(ids[i+1] | ...), in order
  std::vector<float> logits;          // for kScore with return_logits
  std::vector<int64_t> kv_need;       // bytes per stage of the whole sequence, alone
  std::vector<int64_t> kv_reserved;   // bytes per stage it holds alone, while admitted (PrefixCache::OwnBytes)
  // While admitted: the kept prefix it starts from (null: position 0), and those it keeps on the way,
  // by increasing length (scheduling/prefix_cache.h).
  std::shared_ptr<PrefixEntry> prefix_from;
  std::vector<std::shared_ptr<PrefixEntry>> prefix_saves;
  int64_t cached_tokens = 0;          // prompt positions its latest start took from a kept prefix
  int bypassed = 0;                   // later requests admitted while this one waited (KvAdmission)
  std::optional<Clock::time_point> admitted, first_token, last_token, finished;

  RequestEvents events;  // what clients see

  bool done() const { return state == RequestState::kDone; }
  // The first position it feeds: the length of the prefix it starts from.
  int64_t start() const;
  // Positions the whole sequence can reach: what its KV is sized for.
  int64_t SequenceTokens() const {
    return static_cast<int64_t>(prompt.size()) + (kind == RequestKind::kGenerate ? max_new_tokens : 0);
  }
  int64_t known() const { return static_cast<int64_t>(prompt.size() + generated.size()); }
  int32_t token_at(int64_t i) const {
    return i < static_cast<int64_t>(prompt.size()) ? prompt[i] : generated[i - prompt.size()];
  }
};

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_REQUEST_H_
