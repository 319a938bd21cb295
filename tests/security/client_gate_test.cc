#include "coordinator/client_gate.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <vector>

namespace layerpipe {
namespace {

TEST(PeerWithoutPort, DropsOnlyANumericPortOfAnIpPeer) {
  EXPECT_EQ(PeerWithoutPort("ipv4:10.1.2.3:51234"), "ipv4:10.1.2.3");
  EXPECT_EQ(PeerWithoutPort("ipv6:[::1]:80"), "ipv6:[::1]");
  EXPECT_EQ(PeerWithoutPort("ipv6:%5B::1%5D:80"), "ipv6:%5B::1%5D");
  EXPECT_EQ(PeerWithoutPort("unix:/tmp/sock"), "unix:/tmp/sock");
  EXPECT_EQ(PeerWithoutPort("unix:5"), "unix:5");
  EXPECT_EQ(PeerWithoutPort("ipv4:10.1.2.3:"), "ipv4:10.1.2.3:");
  EXPECT_EQ(PeerWithoutPort(""), "");
}

TEST(ClientGate, WithoutTokensOrLimitEveryoneIsLetIn) {
  ClientGate gate({});
  std::vector<ClientGate::Pass> passes;
  for (int i = 0; i < 100; ++i) {
    auto p = gate.Admit("", "ipv4:10.0.0.1:1");
    ASSERT_TRUE(p.ok()) << p.status();
    passes.push_back(*std::move(p));
  }
  EXPECT_EQ(gate.open("ipv4:10.0.0.1"), 0);  // nothing is counted without a limit
}

TEST(ClientGate, LimitPerPeerAddressAcrossItsConnections) {
  ClientGate gate({nullptr, 2});
  auto a = gate.Admit("", "ipv4:10.0.0.1:1000");
  auto b = gate.Admit("", "ipv4:10.0.0.1:1001");  // another connection of the same host
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(gate.open("ipv4:10.0.0.1"), 2);
  auto c = gate.Admit("", "ipv4:10.0.0.1:1002");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("ipv4:10.0.0.1 already has 2 requests open"), std::string::npos)
      << c.status();
  EXPECT_TRUE(gate.Admit("", "ipv4:10.0.0.2:1000").ok());  // another client is not affected
  { ClientGate::Pass done = *std::move(a); }  // one request ends
  EXPECT_EQ(gate.open("ipv4:10.0.0.1"), 1);
  auto d = gate.Admit("", "ipv4:10.0.0.1:1003");
  EXPECT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(gate.open("ipv4:10.0.0.1"), 2);
}

TEST(ClientGate, PassesCountOnceWhenMoved) {
  ClientGate gate({nullptr, 1});
  {
    auto a = gate.Admit("", "ipv4:1.1.1.1:1");
    ASSERT_TRUE(a.ok());
    ClientGate::Pass moved = *std::move(a);
    ClientGate::Pass assigned;
    assigned = std::move(moved);
    EXPECT_EQ(gate.open("ipv4:1.1.1.1"), 1);
  }
  EXPECT_EQ(gate.open("ipv4:1.1.1.1"), 0);
  EXPECT_TRUE(gate.Admit("", "ipv4:1.1.1.1:2").ok());
}

class GateWithTokens : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "layerpipe_gate_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ + "/tokens") << "alice:tok-a1\nalice:tok-a2\nbob:tok-b\n";
    auto tokens = AuthTokens::Load(dir_ + "/tokens");
    ASSERT_TRUE(tokens.ok()) << tokens.status();
    gate_ = std::make_unique<ClientGate>(ClientGate::Options{*std::move(tokens), 2});
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
  std::unique_ptr<ClientGate> gate_;
};

TEST_F(GateWithTokens, MissingMalformedOrUnknownTokensAreUnauthenticated) {
  for (const char* header : {"", "tok-a1", "Basic tok-a1", "Bearer", "Bearer ", "Bearer tok-x", "Bearer tok-a1x"}) {
    auto p = gate_->Admit(header, "ipv4:10.0.0.1:1");
    EXPECT_EQ(p.status().code(), absl::StatusCode::kUnauthenticated) << "header \"" << header << "\"";
  }
  EXPECT_EQ(gate_->open("alice"), 0);
}

TEST_F(GateWithTokens, TheTokensNameIsTheClient) {
  auto a = gate_->Admit("Bearer tok-a1", "ipv4:10.0.0.1:1");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->client(), "alice");
  // Scheme case and spacing do not matter; alice's second token counts as alice, from anywhere.
  auto b = gate_->Admit("bearer   tok-a2", "ipv4:10.9.9.9:7");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(gate_->open("alice"), 2);
  auto c = gate_->Admit("Bearer tok-a1", "ipv4:10.0.0.5:1");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("client alice already has 2"), std::string::npos) << c.status();
  // Bob, from alice's address, is his own client.
  auto d = gate_->Admit("Bearer tok-b", "ipv4:10.0.0.1:2");
  EXPECT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(gate_->open("bob"), 1);
}

TEST_F(GateWithTokens, WithoutALimitTheClientIsStillNamed) {
  // Jobs belong to the client a pass names: a gate that counts nothing must still say who it let in.
  auto tokens = AuthTokens::Load(dir_ + "/tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ClientGate unlimited(ClientGate::Options{*std::move(tokens), 0});
  for (int i = 0; i < 5; ++i) {
    auto p = unlimited.Admit("Bearer tok-b", "ipv4:10.0.0.1:1");
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->client(), "bob");
  }
  EXPECT_EQ(unlimited.open("bob"), 0);
}

}  // namespace
}  // namespace layerpipe
