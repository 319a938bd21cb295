#include "coordinator/scheduling/prefix_keys.h"

#include <openssl/evp.h>

#include <algorithm>
#include <memory>

#include "engine/model/kv_layout.h"

namespace layerpipe {
namespace {

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) { EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr); }
  void Add(const void* data, size_t n) { EVP_DigestUpdate(ctx_.get(), data, n); }
  void Add(int64_t v) { Add(&v, sizeof(v)); }
  std::string Finish() {
    std::string out(32, '\0');
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_.get(), reinterpret_cast<unsigned char*>(out.data()), &n);
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

// One attachment's identity: its kind, where it sits and what it holds (the prepared pixels, or the
// samples), hashed whole once.
std::string SpanDigest(const SoftSpan& span, int64_t samples_per_token) {
  Sha256 h;
  h.Add(static_cast<int64_t>(span.kind));
  h.Add(span.offset);
  h.Add(span.count);
  if (span.kind == SoftSpan::Kind::kImage) {
    h.Add(span.image.height);
    h.Add(span.image.width);
    h.Add(span.image.rgb, static_cast<size_t>(span.image.height * span.image.width * 3));
  } else {
    h.Add(span.samples, static_cast<size_t>(span.count * samples_per_token) * sizeof(float));
  }
  return h.Finish();
}

bool InsideAnImage(const std::vector<SoftSpan>& soft, int64_t cut) {
  return std::any_of(soft.begin(), soft.end(), [cut](const SoftSpan& s) {
    return s.kind == SoftSpan::Kind::kImage && s.offset < cut && cut < s.offset + s.count;
  });
}

}  // namespace

std::vector<PrefixCut> PrefixCuts(const std::vector<int32_t>& prompt, const std::vector<SoftSpan>& soft,
                                  int64_t samples_per_token) {
  std::vector<PrefixCut> cuts;
  const int64_t last = static_cast<int64_t>(prompt.size()) - 1;  // the last token is always prefilled
  std::vector<SoftSpan> spans = soft;
  std::sort(spans.begin(), spans.end(), [](const SoftSpan& a, const SoftSpan& b) { return a.offset < b.offset; });
  std::string chain;
  size_t next_span = 0;
  for (int64_t begin = 0; begin + kv::kPageTokens <= last; begin += kv::kPageTokens) {
    const int64_t end = begin + kv::kPageTokens;
    Sha256 h;
    h.Add(chain.data(), chain.size());
    h.Add(prompt.data() + begin, static_cast<size_t>(kv::kPageTokens) * sizeof(int32_t));
    for (; next_span < spans.size() && spans[next_span].offset < end; ++next_span) {
      const std::string d = SpanDigest(spans[next_span], samples_per_token);
      h.Add(d.data(), d.size());
    }
    chain = h.Finish();
    if (!InsideAnImage(spans, end)) cuts.push_back({end, chain});
  }
  return cuts;
}

}  // namespace layerpipe
