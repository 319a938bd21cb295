// Who may call the client API, and how much at once. Every LayerPipe RPC and HTTP call passes the gate
// first (it knows neither transport):
// - with tokens, it needs "authorization: Bearer <token>" metadata naming a known token, otherwise
//   UNAUTHENTICATED; the token's name is the client;
// - with a per-client limit, a client (the token's name, or without tokens the caller's IP address) with
//   that many RPCs open gets RESOURCE_EXHAUSTED. An RPC counts until its handler returns, so a Generate
//   or StreamJob stream counts for as long as it is open; a submitted job stops counting once
//   SubmitJob has answered.
#ifndef LAYERPIPE_COORDINATOR_CLIENT_GATE_H_
#define LAYERPIPE_COORDINATOR_CLIENT_GATE_H_

#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/auth_tokens.h"

namespace layerpipe {

class ClientGate {
 public:
  struct Options {
    std::shared_ptr<AuthTokens> tokens;  // null: no authentication
    int max_concurrent_per_client = 0;   // 0: no limit
    std::set<std::string> admins;         // token names that see every client's jobs
  };

  // Proof that an RPC was let in; the client's count drops when it is destroyed.
  class Pass {
   public:
    Pass() = default;
    Pass(Pass&& other) noexcept;
    Pass& operator=(Pass&& other) noexcept;
    ~Pass();
    const std::string& client() const { return client_; }

   private:
    friend class ClientGate;
    Pass(ClientGate* gate, std::string client) : gate_(gate), client_(std::move(client)) {}
    void Release();
    ClientGate* gate_ = nullptr;  // null: nothing to give back
    std::string client_;
  };

  explicit ClientGate(Options options);

  // `authorization`: the request's "authorization" metadata ("" when absent). `peer`: gRPC's peer
  // string, e.g. "ipv4:10.1.2.3:51234"; the port is dropped, so that a client's connections count
  // together.
  absl::StatusOr<Pass> Admit(absl::string_view authorization, absl::string_view peer);

  // RPCs open for `client` now.
  int open(const std::string& client);

  // Whether clients are told apart by token: then jobs belong to the client that submitted them.
  bool authenticates() const { return options_.tokens != nullptr; }
  bool IsAdmin(const std::string& client) const { return options_.admins.count(client) > 0; }

 private:
  void Release(const std::string& client);

  const Options options_;
  std::mutex mu_;
  std::map<std::string, int> open_;  // only clients with open RPCs
};

// "ipv4:10.1.2.3:51234" → "ipv4:10.1.2.3", "ipv6:[::1]:80" → "ipv6:[::1]"; anything without a numeric
// port stays as it is.
std::string PeerWithoutPort(absl::string_view peer);

}  // namespace layerpipe

#endif  // LAYERPIPE_COORDINATOR_CLIENT_GATE_H_
