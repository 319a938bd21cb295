#include "coordinator/client_gate.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace layerpipe {

std::string PeerWithoutPort(absl::string_view peer) {
  const size_t colon = peer.rfind(':');
  if (colon == absl::string_view::npos || colon + 1 == peer.size()) return std::string(peer);
  for (char c : peer.substr(colon + 1)) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::string(peer);
  }
  const absl::string_view host = peer.substr(0, colon);
  // "unix:5" names a socket, not a host and port.
  if (!absl::StartsWith(host, "ipv4:") && !absl::StartsWith(host, "ipv6:")) return std::string(peer);
  return std::string(host);
}

ClientGate::Pass::Pass(Pass&& other) noexcept : gate_(other.gate_), client_(std::move(other.client_)) {
  other.gate_ = nullptr;
}

ClientGate::Pass& ClientGate::Pass::operator=(Pass&& other) noexcept {
  if (this != &other) {
    Release();
    gate_ = other.gate_;
    client_ = std::move(other.client_);
    other.gate_ = nullptr;
  }
  return *this;
}

ClientGate::Pass::~Pass() { Release(); }

void ClientGate::Pass::Release() {
  if (gate_ != nullptr) gate_->Release(client_);
  gate_ = nullptr;
}

ClientGate::ClientGate(Options options) : options_(std::move(options)) {}

absl::StatusOr<ClientGate::Pass> ClientGate::Admit(absl::string_view authorization, absl::string_view peer) {
  std::string client;
  if (options_.tokens) {
    if (authorization.empty()) {
      return absl::UnauthenticatedError("this coordinator needs \"authorization: Bearer <token>\" metadata");
    }
    absl::string_view token = absl::StripAsciiWhitespace(authorization);
    if (token.size() < 7 || !absl::EqualsIgnoreCase(token.substr(0, 7), "bearer ")) {
      return absl::UnauthenticatedError("the authorization metadata is not of the form \"Bearer <token>\"");
    }
    token = absl::StripLeadingAsciiWhitespace(token.substr(7));
    auto name = options_.tokens->Lookup(token);
    if (!name) return absl::UnauthenticatedError("the bearer token is not valid");
    client = *std::move(name);
  } else {
    client = PeerWithoutPort(peer);
  }
  // Without a limit nothing is counted, but the client is still named: jobs belong to it.
  if (options_.max_concurrent_per_client <= 0) return Pass(nullptr, std::move(client));
  std::lock_guard<std::mutex> lock(mu_);
  int& n = open_[client];
  if (n >= options_.max_concurrent_per_client) {
    if (n == 0) open_.erase(client);
    return absl::ResourceExhaustedError(
        absl::StrCat("client ", client, " already has ", n, " requests open (--max-concurrent-per-client ",
                     options_.max_concurrent_per_client, ")"));
  }
  ++n;
  return Pass(this, std::move(client));
}

int ClientGate::open(const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(client);
  return it == open_.end() ? 0 : it->second;
}

void ClientGate::Release(const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(client);
  if (it == open_.end()) return;
  if (--it->second <= 0) open_.erase(it);
}

}  // namespace layerpipe
