#include "cli/remote_client.h"

#include <grpcpp/support/client_interceptor.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/tls.h"

namespace layerpipe::cli {
namespace {

// Adds the bearer token to every call's metadata. An interceptor rather than call credentials: gRPC sends
// call credentials only over TLS, and a plaintext hop to a local TLS-terminating proxy or sidecar is a
// legitimate place for a token too.
class BearerToken final : public grpc::experimental::Interceptor {
 public:
  explicit BearerToken(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", *header_});
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;
};

class BearerTokenFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenFactory(std::string token) : header_(absl::StrCat("Bearer ", token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo*) override {
    return new BearerToken(&header_);
  }

 private:
  const std::string header_;  // lives as long as the channel, which owns this factory
};

absl::StatusOr<std::string> TokenFromArgs(const Args& args) {
  if (args.Has("token") && args.Has("token-file")) {
    return absl::InvalidArgumentError("give at most one of --token and --token-file");
  }
  std::string token;
  if (args.Has("token")) {
    token = args.StringOr("token", "");
  } else if (args.Has("token-file")) {
    const std::string path = args.StringOr("token-file", "");
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("--token-file: cannot read ", path, ": ", std::strerror(errno)));
    std::ostringstream text;
    text << in.rdbuf();
    token = std::string(absl::StripAsciiWhitespace(text.str()));
  } else {
    return std::string();
  }
  if (token.empty()) return absl::InvalidArgumentError("the token is empty");
  for (char c : token) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError("a token is printable ASCII without spaces (one token, on one line)");
    }
  }
  return token;
}

}  // namespace

std::vector<FlagSpec> ConnectionFlagSpecs() {
  return {
      {"tls", true, false, "TLS to the coordinator, verified against the system's CAs (implied by --tls-ca)"},
      {"tls-ca", false, false, "PEM CA that signs the coordinator's certificate"},
      {"tls-cert", false, false, "PEM client certificate, for a coordinator that requires one"},
      {"tls-key", false, false, "PEM private key of --tls-cert"},
      {"tls-server-name", false, false, "name to verify the coordinator's certificate against (default: the host)"},
      {"token", false, false, "bearer token for a coordinator that requires one"},
      {"token-file", false, false, "file holding the bearer token (e.g. a mounted Secret)"},
  };
}

std::vector<std::string> ConnectionFlagNames() {
  std::vector<std::string> names;
  for (const FlagSpec& f : ConnectionFlagSpecs()) names.push_back(f.name);
  return names;
}

absl::StatusOr<std::unique_ptr<v1::LayerPipe::Stub>> ConnectCoordinator(const Args& args) {
  const std::string address = args.StringOr("coordinator", "");
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(-1);

  auto tls_flag = args.Bool("tls", false);
  if (!tls_flag.ok()) return tls_flag.status();
  const bool tls = *tls_flag || args.Has("tls-ca") || args.Has("tls-cert") || args.Has("tls-key") ||
                   args.Has("tls-server-name");
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (tls) {
    auto c = TlsChannelCredentials({args.StringOr("tls-cert", ""), args.StringOr("tls-key", ""),
                                    args.StringOr("tls-ca", "")});
    if (!c.ok()) return absl::Status(c.status().code(), absl::StrCat("TLS: ", c.status().message()));
    credentials = *std::move(c);
    if (args.Has("tls-server-name")) {
      channel_args.SetSslTargetNameOverride(args.StringOr("tls-server-name", ""));
    }
  }

  auto token = TokenFromArgs(args);
  if (!token.ok()) return token.status();
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  if (!token->empty()) interceptors.push_back(std::make_unique<BearerTokenFactory>(*std::move(token)));
  return v1::LayerPipe::NewStub(grpc::experimental::CreateCustomChannelWithInterceptors(
      address, credentials, channel_args, std::move(interceptors)));
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode share the canonical numbering.
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  return absl::Status(code, absl::StrCat(absl::StatusCodeToString(code), ": ", status.error_message()));
}

}  // namespace layerpipe::cli
