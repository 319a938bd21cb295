#include "common/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"

namespace layerpipe {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// OpenSSL's default would prompt on the terminal for an encrypted key; a server must not.
int NoPassphrase(char*, int, int, void*) { return -1; }

absl::StatusOr<std::string> ReadPem(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().empty()) return absl::InvalidArgumentError(absl::StrCat(path, " is empty"));
  return text.str();
}

BioPtr MemoryBio(const std::string& pem) { return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()))); }

// Every certificate in `pem`; an error naming `path` when there is none.
absl::StatusOr<std::vector<X509Ptr>> ParseCertificates(const std::string& pem, const std::string& path) {
  std::vector<X509Ptr> certs;
  BioPtr bio = MemoryBio(pem);
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)) certs.emplace_back(x);
  ERR_clear_error();  // the read that ends the loop always leaves "no start line" behind
  if (certs.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " holds no PEM certificate"));
  return certs;
}

std::string TimeText(const ASN1_TIME* t) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(bio.get(), t);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

absl::Status CheckValidNow(X509* leaf, const std::string& path) {
  if (X509_cmp_current_time(X509_get0_notAfter(leaf)) < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the certificate in ", path, " expired on ", TimeText(X509_get0_notAfter(leaf))));
  }
  if (X509_cmp_current_time(X509_get0_notBefore(leaf)) > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the certificate in ", path, " is not valid before ", TimeText(X509_get0_notBefore(leaf))));
  }
  return absl::OkStatus();
}

struct KeyPair {
  std::string cert_pem;
  std::string key_pem;
};

absl::StatusOr<KeyPair> LoadKeyPair(const TlsFiles& files) {
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(files.cert.empty()
                                          ? absl::StrCat("a key (", files.key, ") without a certificate")
                                          : absl::StrCat("a certificate (", files.cert, ") without a key"));
  }
  KeyPair pair;
  auto cert = ReadPem(files.cert);
  if (!cert.ok()) return cert.status();
  auto key = ReadPem(files.key);
  if (!key.ok()) return key.status();
  auto certs = ParseCertificates(*cert, files.cert);
  if (!certs.ok()) return certs.status();
  if (auto st = CheckValidNow(certs->front().get(), files.cert); !st.ok()) return st;
  BioPtr bio = MemoryBio(*key);
  PkeyPtr pkey(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  ERR_clear_error();
  if (!pkey) {
    return absl::InvalidArgumentError(
        absl::StrCat(files.key, " holds no PEM private key (or an encrypted one, which is not supported)"));
  }
  const bool matches = X509_check_private_key(certs->front().get(), pkey.get()) == 1;
  ERR_clear_error();
  if (!matches) {
    return absl::InvalidArgumentError(
        absl::StrCat("the key in ", files.key, " does not belong to the certificate in ", files.cert));
  }
  pair.cert_pem = *std::move(cert);
  pair.key_pem = *std::move(key);
  return pair;
}

absl::StatusOr<std::string> LoadCa(const std::string& path) {
  auto pem = ReadPem(path);
  if (!pem.ok()) return pem.status();
  // Only parsed: a bundle may legitimately carry an expired root next to the one in use.
  if (auto certs = ParseCertificates(*pem, path); !certs.ok()) return certs.status();
  return pem;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TlsServerCredentials(const TlsFiles& files) {
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError("a TLS server needs both a certificate and a key");
  }
  auto pair = LoadKeyPair(files);
  if (!pair.ok()) return pair.status();
  grpc::SslServerCredentialsOptions options(files.ca.empty()
                                                ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                                : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  if (!files.ca.empty()) {
    auto ca = LoadCa(files.ca);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
  }
  options.pem_key_cert_pairs.push_back({pair->key_pem, pair->cert_pem});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> TlsChannelCredentials(const TlsFiles& files) {
  grpc::SslCredentialsOptions options;
  if (!files.ca.empty()) {
    auto ca = LoadCa(files.ca);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
  }
  if (!files.cert.empty() || !files.key.empty()) {
    auto pair = LoadKeyPair(files);
    if (!pair.ok()) return pair.status();
    options.pem_cert_chain = std::move(pair->cert_pem);
    options.pem_private_key = std::move(pair->key_pem);
  }
  return grpc::SslCredentials(options);
}

absl::StatusOr<MutualTls> LoadMutualTls(const TlsFiles& files) {
  if (files.cert.empty() || files.key.empty() || files.ca.empty()) {
    return absl::InvalidArgumentError("mutual TLS needs a certificate, its key and a CA");
  }
  MutualTls tls;
  auto server = TlsServerCredentials(files);
  if (!server.ok()) return server.status();
  auto channel = TlsChannelCredentials(files);
  if (!channel.ok()) return channel.status();
  tls.server = *std::move(server);
  tls.channel = *std::move(channel);
  return tls;
}

}  // namespace layerpipe
