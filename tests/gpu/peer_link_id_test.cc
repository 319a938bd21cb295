// The CUDA stage's link id (engine/cuda/links/peer_link_id.h), host-only: both parts survive the round trip
// whatever bytes the NCCL id holds, and anything else is refused.
#include "engine/cuda/links/peer_link_id.h"

#include <gtest/gtest.h>

#include <string>

namespace layerpipe::cuda {
namespace {

TEST(PeerLinkIdTest, BothPartsRoundTrip) {
  std::string nccl(128, '\0');
  for (size_t i = 0; i < nccl.size(); ++i) nccl[i] = static_cast<char>(i * 37);
  for (const std::string& n : {nccl, std::string()}) {
    auto parts = DecodePeerLinkId(EncodePeerLinkId(n, "/layerpipe-link-1-2-abc"));
    ASSERT_TRUE(parts.ok()) << parts.status();
    EXPECT_EQ(parts->nccl, n);
    EXPECT_EQ(parts->ipc_name, "/layerpipe-link-1-2-abc");
  }
}

TEST(PeerLinkIdTest, AnythingElseIsRefused) {
  const std::string good = EncodePeerLinkId(std::string(128, 'x'), "/name");
  for (const std::string& bad : {std::string(), good.substr(1), good.substr(0, 7), good.substr(0, good.size() - 5),
                                 EncodePeerLinkId("nccl", ""), std::string(128, '\0')}) {
    EXPECT_EQ(DecodePeerLinkId(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad.size();
  }
}

TEST(PeerLinkIdTest, OnlyRanksZeroAndOneExist) {
  EXPECT_TRUE(ValidatePeerLinkRank(0).ok());
  EXPECT_TRUE(ValidatePeerLinkRank(1).ok());
  for (int bad : {-1, 2, 1 << 30}) EXPECT_EQ(ValidatePeerLinkRank(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
}

}  // namespace
}  // namespace layerpipe::cuda
