// --image and --audio: a local command's attachments, read from files and prepared here.
#ifndef LAYERPIPE_CLI_MEDIA_INPUTS_H_
#define LAYERPIPE_CLI_MEDIA_INPUTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/args.h"
#include "engine/media/prompt_media.h"
#include "engine/model/config.h"

namespace layerpipe::cli {

std::vector<FlagSpec> MediaFlagSpecs();

// The files of every --image and --audio, in order of kind (NotFound naming one that cannot be read).
absl::StatusOr<std::vector<std::pair<SoftSpan::Kind, std::string>>> ReadMediaFiles(const Args& args);

// ReadMediaFiles, decoded for `config`'s model; errors name the flag and the file.
absl::StatusOr<PromptMedia> LoadLocalMedia(const Args& args, const ModelConfig& config);

}  // namespace layerpipe::cli

#endif  // LAYERPIPE_CLI_MEDIA_INPUTS_H_
