#include "cli/remote_commands.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "cli/cli_util.h"
#include "cli/npy.h"
#include "cli/remote_client.h"
#include "cli/remote_request.h"
#include "cli/remote_stream.h"

namespace layerpipe::cli {
namespace {

constexpr const char* kNotRemote = "is not used with --coordinator (the cluster holds the model)";

}  // namespace

int RunRemoteGenerate(const Args& args) {
  const std::string cmd = "generate";
  if (auto st = RejectFlags(args, {"model", "tokenizer", "precision", "threads", "prefill-chunk", "quantize", "quantize-head"}, kNotRemote);
      !st.ok()) {
    return Fail(cmd, st);
  }
  auto req = GenerateRequestFromArgs(args);
  if (!req.ok()) return Fail(cmd, req.status());
  auto stub = ConnectCoordinator(args);
  if (!stub.ok()) return Fail(cmd, stub.status());
  grpc::ClientContext context;
  auto reader = (*stub)->Generate(&context, *req);
  auto outcome = FollowGenerateStream(context, *reader, 0);
  if (!outcome.ok()) return Fail(cmd, outcome.status());
  PrintStreamOutcome(*outcome, args.Has("print-ids"));
  return 0;
}

int RunRemoteScore(const Args& args) {
  const std::string cmd = "score";
  if (auto st = RejectFlags(args, {"model", "precision", "threads", "prefill-chunk", "quantize", "quantize-head"}, kNotRemote); !st.ok()) {
    return Fail(cmd, st);
  }
  if (args.Has("ids") == args.Has("text")) {
    return Fail(cmd, absl::InvalidArgumentError("give exactly one of --ids and --text"));
  }
  v1::ScoreRequest req;
  if (args.Has("ids")) {
    auto ids = args.Ids("ids");
    if (!ids.ok()) return Fail(cmd, ids.status());
    req.mutable_ids()->mutable_ids()->Assign(ids->begin(), ids->end());
  } else {
    req.set_text(args.StringOr("text", ""));
  }
  if (auto st = AddAttachments(args, req.mutable_attachments()); !st.ok()) return Fail(cmd, st);
  const std::string logits_out = args.StringOr("logits-out", "");
  req.set_return_logits(!logits_out.empty());

  auto stub = ConnectCoordinator(args);
  if (!stub.ok()) return Fail(cmd, stub.status());
  grpc::ClientContext context;
  v1::ScoreResponse resp;
  if (auto st = FromGrpc((*stub)->Score(&context, req, &resp)); !st.ok()) return Fail(cmd, st);
  const int64_t n = resp.ids_size();
  if (resp.logprobs_size() != n) {
    return Fail(cmd, absl::DataLossError(absl::StrCat("the coordinator returned ", resp.logprobs_size(),
                                                      " logprobs for ", n, " ids")));
  }
  if (!logits_out.empty()) {
    if (resp.vocab_size() <= 0 || resp.logits_size() != n * resp.vocab_size()) {
      return Fail(cmd, absl::DataLossError(absl::StrCat("the coordinator returned ", resp.logits_size(),
                                                        " logits for ", n, " ids and vocab ", resp.vocab_size())));
    }
    if (auto st = WriteNpyF32(logits_out, {n, resp.vocab_size()}, resp.logits().data()); !st.ok()) {
      return Fail(cmd, st);
    }
    std::printf("wrote logits [%lld, %lld] to %s\n", static_cast<long long>(n),
                static_cast<long long>(resp.vocab_size()), logits_out.c_str());
    return 0;
  }
  // One line per position: index, id, log p(id | the ids before it) (0 for the first).
  for (int64_t i = 0; i < n; ++i) {
    std::printf("%lld\t%d\t%.9g\n", static_cast<long long>(i), resp.ids(i), resp.logprobs(i));
  }
  return 0;
}

}  // namespace layerpipe::cli
