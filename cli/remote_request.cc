#include "cli/remote_request.h"

#include <cstdint>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/cli_util.h"
#include "cli/media_inputs.h"
#include "engine/tokenizer/chat_messages_json.h"

namespace layerpipe::cli {
namespace {

// Unlike Args::Double this lets nan and inf through: rejecting them is the coordinator's job, and the
// client must not hide what the server says about them.
absl::Status ParseFloatFlag(const Args& args, const std::string& name, float* out) {
  auto text = args.String(name);
  if (!text.ok()) return text.status();
  if (!absl::SimpleAtof(*text, out)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " must be a number, got \"", *text, "\""));
  }
  return absl::OkStatus();
}

absl::Status ParseInt32Flag(const Args& args, const std::string& name, int32_t* out) {
  auto v = args.Int(name);
  if (!v.ok()) return v.status();
  if (*v < INT32_MIN || *v > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " is out of the 32-bit range"));
  }
  *out = static_cast<int32_t>(*v);
  return absl::OkStatus();
}

}  // namespace

std::vector<FlagSpec> RemoteGenerateFlagSpecs() {
  std::vector<FlagSpec> specs = {
      {"coordinator", false, false, "coordinator address HOST:PORT"},
      {"prompt", false, false, "prompt text (the coordinator tokenizes it, with <bos>)"},
      {"chat", true, false, "wrap --prompt in the chat format of the -it model"},
      {"system", false, false, "system turn for --chat"},
      {"ids", false, false, "prompt token ids, comma-separated (instead of --prompt)"},
      {"messages", false, false, "a multi-turn chat: a JSON file with an array of {role, content} (instead of --prompt)"},
      {"max-new-tokens", false, false, "tokens to generate at most (required)"},
      {"stop", false, true, "stop string (repeatable)"},
      {"stop-ids", false, false, "stop ids, comma-separated (default: the model's generation_config)"},
      {"top-logprobs", false, false, "also report the K most likely ids of every generated token (0..20)"},
  };
  for (FlagSpec& f : SamplingFlagSpecs()) specs.push_back(f);
  for (FlagSpec& f : MediaFlagSpecs()) specs.push_back(f);
  return specs;
}

absl::Status AddAttachments(const Args& args, google::protobuf::RepeatedPtrField<v1::Attachment>* out) {
  auto files = ReadMediaFiles(args);
  if (!files.ok()) return files.status();
  // The coordinator decodes them; it pairs them with placeholders or id runs in order of kind.
  for (auto& [kind, bytes] : *files) {
    v1::Attachment* a = out->Add();
    if (kind == SoftSpan::Kind::kImage) {
      a->set_image(std::move(bytes));
    } else {
      a->set_audio(std::move(bytes));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::GenerateRequest> GenerateRequestFromArgs(const Args& args) {
  if (auto st = CheckPromptFlags(args); !st.ok()) return st;
  if (args.Has("system") && !args.Has("chat")) return absl::InvalidArgumentError("--system needs --chat");
  v1::GenerateRequest req;
  if (args.Has("messages")) {
    auto messages = ReadChatMessagesFile(args.StringOr("messages", ""));
    if (!messages.ok()) return messages.status();
    for (const ChatMessage& m : *messages) {
      v1::ChatMessage* out = req.mutable_messages()->add_messages();
      out->set_role(m.role);
      out->set_content(m.content);
    }
  } else if (args.Has("prompt")) {
    req.set_prompt(args.StringOr("prompt", ""));
    auto chat = args.Bool("chat", false);
    if (!chat.ok()) return chat.status();
    req.set_chat(*chat);
    req.set_system(args.StringOr("system", ""));
  } else {
    auto ids = args.Ids("ids");
    if (!ids.ok()) return ids.status();
    req.mutable_ids()->mutable_ids()->Assign(ids->begin(), ids->end());
  }
  if (auto st = AddAttachments(args, req.mutable_attachments()); !st.ok()) return st;
  int32_t max_new = 0;
  if (auto st = ParseInt32Flag(args, "max-new-tokens", &max_new); !st.ok()) return st;
  req.set_max_new_tokens(max_new);

  v1::SamplingParams* s = req.mutable_sampling();
  float f = 0;
  int32_t i = 0;
  if (args.Has("temperature")) {
    if (auto st = ParseFloatFlag(args, "temperature", &f); !st.ok()) return st;
    s->set_temperature(f);
  }
  if (args.Has("top-k")) {
    if (auto st = ParseInt32Flag(args, "top-k", &i); !st.ok()) return st;
    s->set_top_k(i);
  }
  if (args.Has("top-p")) {
    if (auto st = ParseFloatFlag(args, "top-p", &f); !st.ok()) return st;
    s->set_top_p(f);
  }
  if (args.Has("min-p")) {
    if (auto st = ParseFloatFlag(args, "min-p", &f); !st.ok()) return st;
    s->set_min_p(f);
  }
  if (args.Has("repetition-penalty")) {
    if (auto st = ParseFloatFlag(args, "repetition-penalty", &f); !st.ok()) return st;
    s->set_repetition_penalty(f);
  }
  if (args.Has("seed")) {
    auto text = args.String("seed");
    uint64_t seed = 0;
    if (!absl::SimpleAtoi(*text, &seed)) {
      return absl::InvalidArgumentError(absl::StrCat("--seed must be a non-negative integer, got \"", *text, "\""));
    }
    s->set_seed(seed);
  }
  for (const std::string& stop : args.All("stop")) req.add_stop(stop);
  if (args.Has("stop-ids")) {
    auto ids = args.Ids("stop-ids");
    if (!ids.ok()) return ids.status();
    req.mutable_stop_ids()->Assign(ids->begin(), ids->end());
  }
  if (args.Has("top-logprobs")) {
    if (auto st = ParseInt32Flag(args, "top-logprobs", &i); !st.ok()) return st;
    req.set_top_logprobs(i);
  }
  return req;
}

absl::Status CheckPromptFlags(const Args& args) {
  if (int(args.Has("prompt")) + int(args.Has("ids")) + int(args.Has("messages")) != 1) {
    return absl::InvalidArgumentError("give exactly one of --prompt, --ids and --messages");
  }
  if (args.Has("chat") && !args.Has("prompt")) {
    return absl::InvalidArgumentError("--chat needs --prompt (--messages is always a chat)");
  }
  return absl::OkStatus();
}

absl::Status RejectFlags(const Args& args, const std::vector<std::string>& flags, const std::string& why) {
  for (const std::string& f : flags) {
    if (args.Has(f)) return absl::InvalidArgumentError(absl::StrCat("--", f, " ", why));
  }
  return absl::OkStatus();
}

}  // namespace layerpipe::cli
