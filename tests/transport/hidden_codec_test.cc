// The hidden rows' wire format between stages (transport/hidden_codec.h).
#include "transport/hidden_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "engine/model/bf16.h"

namespace layerpipe {
namespace {

TEST(HiddenCodec, Fp32RoundTripsExactly) {
  std::vector<float> h = {1.0f, -2.5f, 3.14159f, 1e-30f, -0.0f, 65504.0f};
  std::string wire;
  EncodeHidden(h.data(), 2, 3, internal::v1::HIDDEN_F32, &wire);
  EXPECT_EQ(wire.size(), 24u);
  auto back = DecodeHidden(internal::v1::HIDDEN_F32, wire, 2, 3);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(std::memcmp(back->data(), h.data(), 24), 0);
}

TEST(HiddenCodec, Bf16RoundsToNearestEven) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 4.0f);
  std::vector<float> h(2 * 37);
  for (float& v : h) v = dist(rng);
  std::string wire;
  EncodeHidden(h.data(), 2, 37, internal::v1::HIDDEN_BF16, &wire);
  EXPECT_EQ(wire.size(), h.size() * 2);
  auto back = DecodeHidden(internal::v1::HIDDEN_BF16, wire, 2, 37);
  ASSERT_TRUE(back.ok()) << back.status();
  for (size_t i = 0; i < h.size(); ++i) EXPECT_EQ((*back)[i], RoundToBf16(h[i])) << i;
}

TEST(HiddenCodec, RejectsWrongSizesAndUnknownDtypes) {
  std::string wire(4 * 6, '\0');
  auto r = DecodeHidden(internal::v1::HIDDEN_F32, wire, 2, 4);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("24 bytes"), absl::string_view::npos) << r.status();
  EXPECT_FALSE(DecodeHidden(internal::v1::HIDDEN_BF16, wire, 2, 3).ok());  // 12 bytes expected
  EXPECT_TRUE(DecodeHidden(internal::v1::HIDDEN_BF16, wire, 4, 3).ok());
  EXPECT_FALSE(DecodeHidden(static_cast<internal::v1::HiddenDType>(7), wire, 2, 3).ok());
  EXPECT_TRUE(DecodeHidden(internal::v1::HIDDEN_F32, "", 0, 3).ok());
}

}  // namespace
}  // namespace layerpipe
