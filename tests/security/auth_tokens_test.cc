#include "coordinator/auth_tokens.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace layerpipe {
namespace {

TEST(ParseAuthTokens, NamedUnnamedCommentsAndBlanks) {
  auto tokens = ParseAuthTokens("# clients\n\nalice: tok-a1\n  tok-anon  \nbob:tok-b\nalice:tok-a2\n", "f");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 4u);
  EXPECT_EQ((*tokens)[0].name, "alice");
  EXPECT_EQ((*tokens)[0].token, "tok-a1");
  EXPECT_EQ((*tokens)[1].name, "line-4");
  EXPECT_EQ((*tokens)[1].token, "tok-anon");
  EXPECT_EQ((*tokens)[2].name, "bob");
  EXPECT_EQ((*tokens)[3].name, "alice");  // a second token for the same client (rotation)
  EXPECT_EQ((*tokens)[3].token, "tok-a2");
}

TEST(ParseAuthTokens, ErrorsNameTheFileAndLine) {
  auto dup = ParseAuthTokens("a:x1\nb:x1\n", "/etc/tokens");
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dup.status().message().find("/etc/tokens:2"), std::string::npos) << dup.status();
  EXPECT_NE(dup.status().message().find("twice"), std::string::npos) << dup.status();

  auto space = ParseAuthTokens("a:has space\n", "f");
  EXPECT_NE(space.status().message().find("f:1"), std::string::npos) << space.status();
  auto no_name = ParseAuthTokens("\n:tok\n", "f");
  EXPECT_NE(no_name.status().message().find("f:2: empty client name"), std::string::npos) << no_name.status();
  auto empty_token = ParseAuthTokens("a:\n", "f");
  EXPECT_EQ(empty_token.status().code(), absl::StatusCode::kInvalidArgument);
  auto control = ParseAuthTokens("a:tok\x01\n", "f");
  EXPECT_EQ(control.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParseAuthTokens, AFileWithoutTokensIsRefused) {
  auto none = ParseAuthTokens("# nothing yet\n\n", "/run/secrets/t");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("/run/secrets/t holds no token"), std::string::npos);
}

class AuthTokensFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "layerpipe_tokens_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/tokens";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // Replaced whole, as a Secret update does.
  void Write(const std::string& text) {
    {
      std::ofstream out(path_ + ".new");
      out << text;
    }
    std::filesystem::rename(path_ + ".new", path_);
  }
  std::string dir_, path_;
};

TEST_F(AuthTokensFile, MissingFileIsAnError) {
  auto t = AuthTokens::Load(path_);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find(path_), std::string::npos);
}

TEST_F(AuthTokensFile, LookupAndReloadKeepingTheLastGoodTokens) {
  Write("alice:tok-a\n");
  auto t = AuthTokens::Load(path_, std::chrono::seconds(0));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->Lookup("tok-a"), "alice");
  EXPECT_EQ((*t)->Lookup("tok-b"), std::nullopt);
  EXPECT_EQ((*t)->Lookup(""), std::nullopt);
  EXPECT_EQ((*t)->Lookup("tok-"), std::nullopt);    // a prefix is not the token
  EXPECT_EQ((*t)->Lookup("tok-aa"), std::nullopt);  // nor is a longer one

  Write("bob:tok-b\n");  // alice's token revoked, bob's added
  EXPECT_EQ((*t)->Lookup("tok-b"), "bob");
  EXPECT_EQ((*t)->Lookup("tok-a"), std::nullopt);

  Write("bob:tok b\n");  // broken: the previous tokens stay
  EXPECT_EQ((*t)->Lookup("tok-b"), "bob");
  std::filesystem::remove(path_);  // gone: the same
  EXPECT_EQ((*t)->Lookup("tok-b"), "bob");
  Write("carol:tok-c\n");  // fixed again
  EXPECT_EQ((*t)->Lookup("tok-c"), "carol");
  EXPECT_EQ((*t)->size(), 1u);
}

TEST_F(AuthTokensFile, RecheckIntervalLimitsRereads) {
  Write("alice:tok-a\n");
  auto t = AuthTokens::Load(path_, std::chrono::hours(1));
  ASSERT_TRUE(t.ok()) << t.status();
  Write("bob:tok-b\n");
  EXPECT_EQ((*t)->Lookup("tok-a"), "alice");  // not re-read within the hour
  EXPECT_EQ((*t)->Lookup("tok-b"), std::nullopt);
}

}  // namespace
}  // namespace layerpipe
