// The tiled CPU attention against a float64 reference, and its determinism contract: the same bits
// whatever the chunking, the rows and heads given to a call, the key segments given to a call
// (flash-decoding), or the kernel path (bf16 rows read in place or widened first, 256- or 512-bit
// registers).
#include "engine/cpu/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "engine/cpu/kv_cache.h"
#include "engine/model/bf16.h"

namespace layerpipe {
namespace {

struct Shape {
  int heads, kv_heads, hd;
  int64_t window;  // 0: full attention
  int64_t tokens;
  std::vector<PositionRange> images;  // only with a window, as on sliding layers
};

struct Inputs {
  std::vector<float> q, k, v;  // [tokens][heads·hd], [tokens][kv_heads·hd] (k, v at the cache's precision)
};

Inputs MakeInputs(const Shape& s, Precision precision, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.7f);
  Inputs in;
  in.q.resize(s.tokens * s.heads * s.hd);
  in.k.resize(s.tokens * s.kv_heads * s.hd);
  in.v.resize(in.k.size());
  for (float& x : in.q) x = d(rng);
  for (float& x : in.k) x = d(rng);
  for (float& x : in.v) x = d(rng);
  if (precision == Precision::kBf16) {
    for (float& x : in.k) x = Bf16ToF32(F32ToBf16(x));
    for (float& x : in.v) x = Bf16ToF32(F32ToBf16(x));
  }
  return in;
}

// How one chunk's attention is handed out: heads per call and rows per call, and whether calls take
// all key segments (AttendHeads) or a few at a time, last ones first, as threads of flash-decoding
// would (AttendSegments, then CombineSegments).
struct Split {
  int heads_per_call;  // divides heads / kv_heads
  int64_t rows_per_call;
  int64_t segments_per_call = 0;  // 0: AttendHeads
  bool avx512 = true;             // false: 256-bit registers even where the CPU has AVX-512F
};

void AttendBySegments(const AttentionChunk& c, int h0, int h1, int kv_head, int hd, int64_t r0, int64_t r1,
                      int64_t per_call, AttentionScratch& scratch) {
  const int64_t segments = SegmentCount(c, r0, r1);
  SegmentPartials partials;
  partials.Resize((r1 - r0) * (h1 - h0), segments, hd);
  for (int64_t end = segments; end > 0; end -= per_call) {
    AttendSegments(c, h0, h1, kv_head, hd, r0, r1, std::max<int64_t>(0, end - per_call), end, partials, scratch);
  }
  CombineSegments(c, h0, h1, hd, r0, r1, partials);
}

// Runs the whole sequence through the cache in chunks of the given sizes.
std::vector<float> RunSequence(const Shape& s, Precision precision, const Inputs& in, const std::vector<int64_t>& chunks,
                       Split split) {
  const int64_t qw = s.heads * s.hd, kw = s.kv_heads * s.hd;
  LayerKvCache cache(s.window > 0, s.window, kw, precision);
  std::vector<float> out(s.tokens * qw, NAN);
  AttentionScratch scratch;
  scratch.avx512 = split.avx512 && AttentionAvx512Default();
  const int group = s.heads / s.kv_heads;
  int64_t pos0 = 0;
  for (int64_t n : chunks) {
    std::vector<PositionRange> blocks;
    for (const PositionRange& b : s.images) {
      if (b.begin >= pos0 && b.end <= pos0 + n) blocks.push_back(b);
    }
    AttentionChunk c{&cache,        precision,           pos0, n, s.window, in.q.data() + pos0 * qw, qw,
                     in.k.data() + pos0 * kw, in.v.data() + pos0 * kw, kw, out.data() + pos0 * qw, qw,
                     blocks};
    for (int h = 0; h < s.heads; h += split.heads_per_call) {
      for (int64_t r = 0; r < n; r += split.rows_per_call) {
        const int64_t r1 = std::min(n, r + split.rows_per_call);
        if (split.segments_per_call > 0) {
          AttendBySegments(c, h, h + split.heads_per_call, h / group, s.hd, r, r1, split.segments_per_call, scratch);
        } else {
          AttendHeads(c, h, h + split.heads_per_call, h / group, s.hd, r, r1, scratch);
        }
      }
    }
    StoreChunk(c);
    pos0 += n;
  }
  EXPECT_EQ(pos0, s.tokens);
  return out;
}

// Float64 attention straight from the definition (MODEL.md §2: scale 1, causal, window, image blocks).
std::vector<double> Reference(const Shape& s, const Inputs& in) {
  const int64_t qw = s.heads * s.hd, kw = s.kv_heads * s.hd;
  std::vector<double> out(s.tokens * qw);
  for (int64_t p = 0; p < s.tokens; ++p) {
    int64_t last = p;
    for (const PositionRange& b : s.images) {
      if (p >= b.begin && p < b.end) last = b.end - 1;
    }
    const int64_t first = s.window > 0 ? std::max<int64_t>(0, p - s.window + 1) : 0;
    for (int h = 0; h < s.heads; ++h) {
      const int kvh = h / (s.heads / s.kv_heads);
      std::vector<double> sc;
      for (int64_t j = first; j <= last; ++j) {
        double d = 0;
        for (int e = 0; e < s.hd; ++e) d += double(in.q[p * qw + h * s.hd + e]) * in.k[j * kw + kvh * s.hd + e];
        sc.push_back(d);
      }
      const double mx = *std::max_element(sc.begin(), sc.end());
      double sum = 0;
      for (double& x : sc) sum += (x = std::exp(x - mx));
      for (int e = 0; e < s.hd; ++e) {
        double o = 0;
        for (int64_t j = first; j <= last; ++j) o += sc[j - first] * in.v[j * kw + kvh * s.hd + e];
        out[p * qw + h * s.hd + e] = o / sum;
      }
    }
  }
  return out;
}

std::vector<int64_t> Chunks(int64_t tokens, std::vector<int64_t> sizes) {
  std::vector<int64_t> out;
  int64_t done = 0;
  for (size_t i = 0; done < tokens; ++i) {
    const int64_t n = std::min(tokens - done, sizes[i % sizes.size()]);
    out.push_back(n);
    done += n;
  }
  return out;
}

const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {
      {4, 2, 16, 8, 40, {}},               // a ring that wraps many times
      {4, 2, 16, 8, 40, {{12, 18}}},       // an image block on a sliding layer
      {16, 8, 24, 12, 50, {}},             // GQA 2:1, three vectors per head
      {4, 1, 20, 0, 45, {}},               // full attention, a head_dim with a scalar tail
      {16, 1, 512, 0, 21, {}},             // the 12B's global shape: one 512-wide KV head for 16 heads
      {8, 2, 256, 16, 70, {{20, 30}}},     // the 12B's sliding head width
      // Contexts of several key segments (kKeySegment = 512): the global layout, and a window wider
      // than a segment, so windows span three segments and the ring wraps.
      {16, 1, 32, 0, 1100, {}},
      {4, 2, 32, 700, 1400, {{600, 660}}},
  };
  return shapes;
}

TEST(AttentionTest, MatchesFloat64Reference) {
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    for (const Shape& s : Shapes()) {
      const Inputs in = MakeInputs(s, precision, 7);
      const std::vector<double> ref = Reference(s, in);
      const std::vector<float> got = RunSequence(s, precision, in, Chunks(s.tokens, {s.tokens}), {1, 1000});
      double worst = 0;
      for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(ref[i] - got[i]));
      EXPECT_LT(worst, 2e-5) << "heads " << s.heads << " hd " << s.hd << " window " << s.window;
    }
  }
}

TEST(AttentionTest, BitIdenticalWhateverTheChunkingRowsHeadsAndPath) {
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    for (const Shape& s : Shapes()) {
      const Inputs in = MakeInputs(s, precision, 11);
      const int group = s.heads / s.kv_heads;
      // One call per GQA group and chunk: many query vectors, so bf16 rows are widened first.
      const std::vector<float> base = RunSequence(s, precision, in, {s.tokens}, {group, s.tokens});
      struct Variant {
        std::vector<int64_t> chunks;
        Split split;
      };
      std::vector<Variant> variants = {
          {{s.tokens}, {1, 3}},  // rows and heads split differently
          {{s.tokens}, {group, 5}},
          {{s.tokens}, {group, s.tokens, 0, /*avx512=*/false}},  // 256-bit registers where 512 would run
          {{s.tokens}, {1, 1, 0, /*avx512=*/false}},             // the same, bf16 rows read in place
      };
      if (s.images.empty()) {
        variants.push_back({Chunks(s.tokens, {1}), {group, 1}});  // decode: one token at a time
        // decode with the keys split across (would-be) threads, one and three segments a call
        variants.push_back({Chunks(s.tokens, {1}), {group, 1, 1}});
        variants.push_back({Chunks(s.tokens, {1}), {group, 1, 3}});
        variants.push_back({Chunks(s.tokens, {2, 1}), {1, 2, 2}});
        variants.push_back({Chunks(s.tokens, {1}), {1, 1}});      // one vector per call: bf16 rows read in place
        variants.push_back({Chunks(s.tokens, {7, 3, 11}), {group, 2}});
      } else {  // chunk edges that keep each block whole: at every block's begin and end
        std::vector<int64_t> cuts = {0, s.tokens};
        for (const PositionRange& b : s.images) cuts.insert(cuts.end(), {b.begin, b.end});
        std::sort(cuts.begin(), cuts.end());
        std::vector<int64_t> sizes;
        for (size_t i = 1; i < cuts.size(); ++i) {
          if (cuts[i] > cuts[i - 1]) sizes.push_back(cuts[i] - cuts[i - 1]);
        }
        variants.push_back({sizes, {group, 4}});
        variants.push_back({sizes, {1, 4, 1}});
      }
      for (const Variant& v : variants) {
        const std::vector<float> got = RunSequence(s, precision, in, v.chunks, v.split);
        ASSERT_EQ(got.size(), base.size());
        EXPECT_EQ(std::memcmp(got.data(), base.data(), sizeof(float) * got.size()), 0)
            << "heads " << s.heads << " hd " << s.hd << " window " << s.window << " chunks " << v.chunks.size()
            << " heads/call " << v.split.heads_per_call << " rows/call " << v.split.rows_per_call
            << " segments/call " << v.split.segments_per_call;
      }
    }
  }
}

}  // namespace
}  // namespace layerpipe
