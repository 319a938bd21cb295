// layerpipe job submit|get|stream|cancel|list: generation jobs on a cluster, which outlive the client that
// submitted them and can be followed (and resumed) later.
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/remote_client.h"
#include "cli/remote_request.h"
#include "cli/remote_stream.h"

namespace layerpipe::cli {
namespace {

constexpr const char* kUsage =
    "usage: layerpipe job ACTION --coordinator HOST:PORT [--tls-ca F] [--token T | --token-file F] [flags]\n"
    "actions:\n"
    "  submit  start a generation job (the generate flags); prints its id\n"
    "  get     --job ID: state, progress and the ids and text so far, as JSON\n"
    "  stream  --job ID [--offset K] [--print-ids]: stream its text from token K, live until it ends\n"
    "  cancel  --job ID: cancel it; prints its state as JSON\n"
    "  list    [--state S] [--page-size N] [--page-token T | --all]: one JSON line per job, newest first,\n"
    "          a page at a time (100); the next page's --page-token goes to stderr\n";

const FlagSpec kCoordinator = {"coordinator", false, false, "coordinator address HOST:PORT"};
const FlagSpec kJob = {"job", false, false, "job id (from job submit or job list)"};

// "JOB_DECODING" -> "decoding".
std::string StateName(v1::JobState state) {
  const std::string& full = v1::JobState_Name(state);
  if (full.empty()) return absl::StrCat(static_cast<int>(state));  // a state newer than this client
  absl::string_view name = full;
  if (!absl::ConsumePrefix(&name, "JOB_STATE_")) absl::ConsumePrefix(&name, "JOB_");
  return absl::AsciiStrToLower(name);
}

nlohmann::json JobJson(const v1::JobInfo& info, bool with_output) {
  nlohmann::json j = {{"job_id", info.job_id()},
                      {"state", StateName(info.state())},
                      {"prompt_tokens", info.prompt_tokens()},
                      {"prefilled_tokens", info.prefilled_tokens()},
                      {"generated_tokens", info.generated_tokens()},
                      {"finish_reason", info.finish_reason()},
                      {"error", info.error()}};
  if (with_output) {
    j["ids"] = std::vector<int32_t>(info.ids().begin(), info.ids().end());
    j["text"] = info.text();
  }
  return j;
}

void PrintJson(const nlohmann::json& j) {
  // Generated text need not be valid UTF-8 mid-stream; replace rather than throw.
  std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  std::fflush(stdout);
}

absl::StatusOr<std::string> RequiredJob(const Args& args) {
  auto id = args.String("job");
  if (!id.ok()) return id.status();
  if (id->empty()) return absl::InvalidArgumentError("--job is empty");
  return id;
}

int Submit(const std::string& cmd, const Args& args) {
  auto req = GenerateRequestFromArgs(args);
  if (!req.ok()) return Fail(cmd, req.status());
  v1::SubmitJobRequest submit;
  *submit.mutable_request() = *std::move(req);
  grpc::ClientContext context;
  v1::SubmitJobResponse resp;
  auto stub = ConnectCoordinator(args);
  if (!stub.ok()) return Fail(cmd, stub.status());
  if (auto st = FromGrpc((*stub)->SubmitJob(&context, submit, &resp)); !st.ok()) return Fail(cmd, st);
  std::printf("%s\n", resp.job_id().c_str());
  return 0;
}

int Get(const std::string& cmd, const Args& args) {
  auto id = RequiredJob(args);
  if (!id.ok()) return Fail(cmd, id.status());
  v1::GetJobRequest req;
  req.set_job_id(*id);
  grpc::ClientContext context;
  v1::JobInfo info;
  auto stub = ConnectCoordinator(args);
  if (!stub.ok()) return Fail(cmd, stub.status());
  if (auto st = FromGrpc((*stub)->GetJob(&context, req, &info)); !st.ok()) return Fail(cmd, st);
  PrintJson(JobJson(info, /*with_output=*/true));
  return 0;
}

int Stream(const std::string& cmd, const Args& args) {
  auto id = RequiredJob(args);
  if (!id.ok()) return Fail(cmd, id.status());
  auto offset = args.Int("offset", 0);
  if (!offset.ok()) return Fail(cmd, offset.status());
  v1::StreamJobRequest req;
  req.set_job_id(*id);
  req.set_offset(*offset);
  grpc::ClientContext context;
  auto stub = ConnectCoordinator(args);
  if (!stub.ok()) return Fail(cmd, stub.status());
  auto reader = (*stub)->StreamJob(&context, req);
  auto outcome = FollowGenerateStream(context, *reader, *offset);
  if (!outcome.ok()) return Fail(cmd, outcome.status());
  PrintStreamOutcome(*outcome, args.Has("print-ids"));
  return 0;
}

int Cancel(const std::string& cmd, const Args& args) {
  auto id = RequiredJob(args);
  if (!id.ok()) return Fail(cmd, id.status());
  v1::CancelJobRequest req;
  req.set_job_id(*id);
  grpc::ClientContext context;
  v1::JobInfo info;
  auto stub = ConnectCoordinator(args);
  if (!stub.ok()) return Fail(cmd, stub.status());
  if (auto st = FromGrpc((*stub)->CancelJob(&context, req, &info)); !st.ok()) return Fail(cmd, st);
  PrintJson(JobJson(info, /*with_output=*/false));
  return 0;
}

int List(const std::string& cmd, const Args& args) {
  v1::ListJobsRequest req;
  auto size = args.Int("page-size", 0);
  if (!size.ok()) return Fail(cmd, size.status());
  req.set_page_size(static_cast<int32_t>(*size));
  req.set_page_token(args.StringOr("page-token", ""));
  if (args.Has("state")) {
    // "decoding" -> JOB_DECODING, the names `list` prints.
    v1::JobState state;
    const std::string name = args.StringOr("state", "");
    if (!v1::JobState_Parse("JOB_" + absl::AsciiStrToUpper(name), &state) || state == v1::JOB_STATE_UNSPECIFIED) {
      return Fail(cmd, absl::InvalidArgumentError(absl::StrCat(
                           "--state must be queued, prefilling, decoding, succeeded, failed or cancelled, not \"", name, "\"")));
    }
    req.set_state(state);
  }
  const bool all = args.Has("all");
  if (all && !req.page_token().empty()) {
    return Fail(cmd, absl::InvalidArgumentError("--all starts from the newest job: it takes no --page-token"));
  }
  auto stub = ConnectCoordinator(args);
  if (!stub.ok()) return Fail(cmd, stub.status());
  for (;;) {
    grpc::ClientContext context;
    v1::ListJobsResponse resp;
    if (auto st = FromGrpc((*stub)->ListJobs(&context, req, &resp)); !st.ok()) return Fail(cmd, st);
    for (const v1::JobInfo& info : resp.jobs()) PrintJson(JobJson(info, /*with_output=*/false));
    if (resp.next_page_token().empty()) return 0;
    if (!all) {
      std::fprintf(stderr, "more jobs: --page-token %s\n", resp.next_page_token().c_str());
      return 0;
    }
    req.set_page_token(resp.next_page_token());
  }
}

}  // namespace

int RunJob(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "help") {
    std::fputs(kUsage, argv.empty() ? stderr : stdout);
    return argv.empty() ? 2 : 0;
  }
  const std::string action = argv[0];
  const std::string cmd = "job " + action;
  std::vector<FlagSpec> specs;
  int (*run)(const std::string&, const Args&) = nullptr;
  if (action == "submit") {
    specs = RemoteGenerateFlagSpecs();
    run = Submit;
  } else if (action == "get") {
    specs = {kCoordinator, kJob};
    run = Get;
  } else if (action == "stream") {
    specs = {kCoordinator, kJob, {"offset", false, false, "first generated token to stream (default 0)"},
             {"print-ids", true, false, "print the streamed ids, comma-separated, as the last line"}};
    run = Stream;
  } else if (action == "cancel") {
    specs = {kCoordinator, kJob};
    run = Cancel;
  } else if (action == "list") {
    specs = {kCoordinator,
             {"state", false, false, "only jobs in this state (queued, prefilling, decoding, succeeded, failed, cancelled)"},
             {"page-size", false, false, "jobs per page (default 100, at most 1000)"},
             {"page-token", false, false, "the page after the one that printed it"},
             {"all", true, false, "follow every page to the oldest job"}};
    run = List;
  } else {
    std::fprintf(stderr, "layerpipe job: unknown action \"%s\"\n%s", action.c_str(), kUsage);
    return 2;
  }
  for (FlagSpec& f : ConnectionFlagSpecs()) specs.push_back(f);
  int code = 0;
  auto args = ParseOrExit(cmd, std::vector<std::string>(argv.begin() + 1, argv.end()), specs, &code);
  if (!args) return code;
  if (auto addr = args->String("coordinator"); !addr.ok()) return Fail(cmd, addr.status());
  return run(cmd, *args);
}

}  // namespace layerpipe::cli
