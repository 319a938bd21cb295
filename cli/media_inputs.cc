#include "cli/media_inputs.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace layerpipe::cli {
namespace {

std::string FlagName(SoftSpan::Kind kind) { return kind == SoftSpan::Kind::kImage ? "image" : "audio"; }

}  // namespace

std::vector<FlagSpec> MediaFlagSpecs() {
  return {
      {"image", false, true,
       "a PNG or JPEG attachment (repeatable): a <|image|> in the prompt text, or a run of id 258880 in --ids"},
      {"audio", false, true,
       "a WAV attachment (repeatable): a <|audio|> in the prompt text, or a run of id 258881 in --ids"},
  };
}

absl::StatusOr<std::vector<std::pair<SoftSpan::Kind, std::string>>> ReadMediaFiles(const Args& args) {
  std::vector<std::pair<SoftSpan::Kind, std::string>> files;
  for (SoftSpan::Kind kind : {SoftSpan::Kind::kImage, SoftSpan::Kind::kAudio}) {
    for (const std::string& path : args.All(FlagName(kind))) {
      std::ifstream in(path, std::ios::binary);
      if (!in) return absl::NotFoundError(absl::StrCat("--", FlagName(kind), " ", path, ": cannot open"));
      std::stringstream ss;
      ss << in.rdbuf();
      files.emplace_back(kind, ss.str());
    }
  }
  return files;
}

absl::StatusOr<PromptMedia> LoadLocalMedia(const Args& args, const ModelConfig& config) {
  auto files = ReadMediaFiles(args);
  if (!files.ok()) return files.status();
  std::vector<MediaFile> media;
  std::vector<std::string> paths[2] = {args.All("image"), args.All("audio")};
  size_t next[2] = {0, 0};
  for (const auto& [kind, bytes] : *files) {
    const int k = kind == SoftSpan::Kind::kImage ? 0 : 1;
    media.push_back({kind, bytes, absl::StrCat("--", FlagName(kind), " ", paths[k][next[k]++])});
  }
  return PromptMedia::Decode(media, config);
}

}  // namespace layerpipe::cli
