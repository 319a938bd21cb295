#include "common/tls.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#ifndef LAYERPIPE_MAKE_TEST_CERTS
#error "LAYERPIPE_MAKE_TEST_CERTS: path of tests/security/make_test_certs.sh"
#endif

namespace layerpipe {
namespace {

class Tls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "layerpipe_tls_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = new std::string(tmpl);
    const std::string cmd = std::string("bash ") + LAYERPIPE_MAKE_TEST_CERTS + " " + *dir_;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::string F(const std::string& name) { return *dir_ + "/" + name; }
  static std::string* dir_;
};
std::string* Tls::dir_ = nullptr;

TEST_F(Tls, ValidFilesGiveCredentials) {
  auto plain = TlsServerCredentials({F("api.pem"), F("api.key"), ""});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_NE(*plain, nullptr);
  auto mutual = LoadMutualTls({F("worker.pem"), F("worker.key"), F("cluster-ca.pem")});
  ASSERT_TRUE(mutual.ok()) << mutual.status();
  EXPECT_NE(mutual->server, nullptr);
  EXPECT_NE(mutual->channel, nullptr);
  // A client that only verifies the server: a CA, or nothing at all (the system's roots).
  EXPECT_TRUE(TlsChannelCredentials({"", "", F("api-ca.pem")}).ok());
  EXPECT_TRUE(TlsChannelCredentials({}).ok());
}

TEST_F(Tls, AMissingFileIsNamed) {
  auto s = TlsServerCredentials({F("nope.pem"), F("api.key"), ""});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.status().message().find(F("nope.pem")), std::string::npos) << s.status();
  auto c = TlsChannelCredentials({"", "", F("no-ca.pem")});
  EXPECT_NE(c.status().message().find(F("no-ca.pem")), std::string::npos) << c.status();
}

TEST_F(Tls, HalfAKeyPairIsRefused) {
  EXPECT_EQ(TlsServerCredentials({F("api.pem"), "", ""}).status().code(), absl::StatusCode::kInvalidArgument);
  auto c = TlsChannelCredentials({"", F("worker.key"), F("cluster-ca.pem")});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("without a certificate"), std::string::npos) << c.status();
  auto m = LoadMutualTls({F("worker.pem"), F("worker.key"), ""});
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(Tls, AKeyOfAnotherCertificateNamesBothFiles) {
  auto s = TlsServerCredentials({F("worker.pem"), F("rogue.key"), ""});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find(F("rogue.key")), std::string::npos) << s.status();
  EXPECT_NE(s.status().message().find(F("worker.pem")), std::string::npos) << s.status();
}

TEST_F(Tls, FilesOfTheWrongKindAreRefused) {
  auto swapped = TlsServerCredentials({F("worker.key"), F("worker.pem"), ""});
  EXPECT_EQ(swapped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(swapped.status().message().find("no PEM certificate"), std::string::npos) << swapped.status();
  auto ca_is_key = LoadMutualTls({F("worker.pem"), F("worker.key"), F("cluster-ca.key")});
  EXPECT_NE(ca_is_key.status().message().find(F("cluster-ca.key") + " holds no PEM certificate"), std::string::npos)
      << ca_is_key.status();
  std::ofstream(F("empty.pem")).flush();
  auto empty = TlsServerCredentials({F("empty.pem"), F("worker.key"), ""});
  EXPECT_NE(empty.status().message().find("is empty"), std::string::npos) << empty.status();
}

TEST_F(Tls, AnExpiredCertificateIsRefusedAtStart) {
  auto s = LoadMutualTls({F("expired.pem"), F("expired.key"), F("cluster-ca.pem")});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("expired on"), std::string::npos) << s.status();
}

}  // namespace
}  // namespace layerpipe
