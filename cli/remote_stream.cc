#include "cli/remote_stream.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/remote_client.h"

namespace layerpipe::cli {

absl::StatusOr<StreamOutcome> FollowGenerateStream(grpc::ClientContext& context,
                                                   grpc::ClientReaderInterface<v1::GenerateResponse>& reader,
                                                   int64_t first_offset) {
  StreamOutcome outcome;
  bool wrote_text = false;
  absl::Status problem;
  v1::GenerateResponse msg;
  while (reader.Read(&msg)) {
    if (!outcome.finish_reason.empty()) {
      problem = absl::DataLossError("the coordinator sent a message after the final one");
      break;
    }
    const int64_t expected = first_offset + static_cast<int64_t>(outcome.tokens.size());
    if (msg.tokens_size() > 0 && msg.offset() != expected) {
      problem = absl::DataLossError(
          absl::StrCat("the coordinator's stream jumped from token ", expected, " to token ", msg.offset()));
      break;
    }
    if (!msg.text().empty()) {
      std::fwrite(msg.text().data(), 1, msg.text().size(), stdout);
      std::fflush(stdout);
      wrote_text = true;
    }
    for (v1::TokenInfo& t : *msg.mutable_tokens()) outcome.tokens.push_back(std::move(t));
    if (!msg.finish_reason().empty()) {
      outcome.finish_reason = msg.finish_reason();
      outcome.usage = msg.usage();
      outcome.timings = msg.timings();
    }
  }
  if (!problem.ok()) context.TryCancel();
  grpc::Status status = reader.Finish();
  if (problem.ok()) problem = FromGrpc(status);
  if (problem.ok() && outcome.finish_reason.empty()) {
    problem = absl::DataLossError("the coordinator's stream ended without a finish reason");
  }
  if (!problem.ok()) {
    if (wrote_text) std::fputc('\n', stdout);
    std::fflush(stdout);
    return problem;
  }
  return outcome;
}

void PrintStreamOutcome(const StreamOutcome& outcome, bool print_ids) {
  std::fputc('\n', stdout);
  if (print_ids) {
    std::string ids;
    for (const v1::TokenInfo& t : outcome.tokens) absl::StrAppend(&ids, ids.empty() ? "" : ",", t.id());
    std::printf("%s\n", ids.c_str());
  }
  std::fflush(stdout);
  for (const v1::TokenInfo& t : outcome.tokens) {
    if (t.top_size() == 0) continue;
    std::string line = absl::StrFormat("token %d logprob %.6f | top", t.id(), t.logprob());
    for (const v1::TopLogprob& alt : t.top()) absl::StrAppendFormat(&line, " %d:%.6f", alt.id(), alt.logprob());
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  const v1::Timings& tm = outcome.timings;
  std::fprintf(stderr,
               "[%d prompt tokens (%d cached), %d generated, finish=%s, queue %.1f ms, first token %.1f ms, "
               "total %.1f ms, decode %.2f tok/s]\n",
               outcome.usage.prompt_tokens(), outcome.usage.cached_prompt_tokens(), outcome.usage.completion_tokens(),
               outcome.finish_reason.c_str(),
               tm.queue_ms(), tm.time_to_first_token_ms(), tm.total_ms(), tm.decode_tokens_per_s());
}

}  // namespace layerpipe::cli
