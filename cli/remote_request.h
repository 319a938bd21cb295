// Generation flags turned into a layerpipe.v1.GenerateRequest, shared by `generate --coordinator` and
// `job submit`.
#ifndef LAYERPIPE_CLI_REMOTE_REQUEST_H_
#define LAYERPIPE_CLI_REMOTE_REQUEST_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/args.h"
#include "proto/layerpipe.pb.h"

namespace layerpipe::cli {

// --coordinator plus the generate flags the coordinator understands: --prompt, --chat, --system, --ids, --messages,
// --max-new-tokens, the sampling flags, --stop, --stop-ids, --top-logprobs, --image and --audio.
std::vector<FlagSpec> RemoteGenerateFlagSpecs();

// Builds the request. Only the form of the flags is checked here (numbers parse, exactly one input); the
// values are the coordinator's to judge, so a bad one comes back as its INVALID_ARGUMENT and message.
// Sampling fields are set only for the flags given, leaving the rest to the coordinator's defaults.
absl::StatusOr<v1::GenerateRequest> GenerateRequestFromArgs(const Args& args);

// The --image and --audio files as request attachments, in order of kind.
absl::Status AddAttachments(const Args& args, google::protobuf::RepeatedPtrField<v1::Attachment>* out);

// Exactly one of --prompt, --ids and --messages; --chat only with --prompt.
absl::Status CheckPromptFlags(const Args& args);

// An error naming the first of `flags` that was given: they only mean something for a local model.
absl::Status RejectFlags(const Args& args, const std::vector<std::string>& flags, const std::string& why);

}  // namespace layerpipe::cli

#endif  // LAYERPIPE_CLI_REMOTE_REQUEST_H_
