// Following a coordinator's stream of GenerateResponses (Generate or StreamJob): text to stdout as it
// arrives, then the ids and a summary, in the same form as the local `layerpipe generate`.
#ifndef LAYERPIPE_CLI_REMOTE_STREAM_H_
#define LAYERPIPE_CLI_REMOTE_STREAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/sync_stream.h>

#include "absl/status/statusor.h"
#include "proto/layerpipe.pb.h"

namespace layerpipe::cli {

struct StreamOutcome {
  std::vector<v1::TokenInfo> tokens;  // in order, starting at the first offset asked for
  std::string finish_reason;
  v1::Usage usage;
  v1::Timings timings;
};

// Reads `reader` to the end, writing each message's text to stdout (flushed) as it comes. The tokens must
// arrive contiguously from `first_offset`; a gap, a missing final message or an RPC error ends it with an
// error (after a newline on stdout if text was written, so that the error stands on its own line).
absl::StatusOr<StreamOutcome> FollowGenerateStream(grpc::ClientContext& context,
                                                   grpc::ClientReaderInterface<v1::GenerateResponse>& reader,
                                                   int64_t first_offset);

// The rest of the local `generate` output: a newline, with `print_ids` the ids comma-separated on one
// line, then on stderr one line per token that carries top alternatives and a summary line with the
// finish reason and the coordinator's timings.
void PrintStreamOutcome(const StreamOutcome& outcome, bool print_ids);

}  // namespace layerpipe::cli

#endif  // LAYERPIPE_CLI_REMOTE_STREAM_H_
