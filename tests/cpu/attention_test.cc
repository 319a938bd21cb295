// The tiled CPU attention against a float64 reference, and its determinism contract: the same bits
// whatever the chunking, the rows and heads given to a call, the key segments given to a call
// (flash-decoding), or the kernel path (bf16 rows read in place or widened first, 256- or 512-bit
// registers); the vdpbf16ps path (bf16 pairs) has bits of its own, held to the same contract.
#include "engine/cpu/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/kv_cache.h"
#include "engine/cpu/matmul.h"
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
  bool bf16_dot = false;          // a bf16 cache's products on vdpbf16ps (where the CPU has them)
};

// Whether a bf16 cache's products run on fp32 values (false) or bf16 pairs (true): both where this
// CPU runs the pairs, else only the first.
std::vector<bool> DotPaths(Precision precision) {
  if (precision == Precision::kBf16 && CpuSupportsAvx512Bf16()) return {false, true};
  return {false};
}

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
  scratch.bf16_dot = split.bf16_dot;
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
// With `bf16_products`, the roundings of the vdpbf16ps path (attention_dot.h) are made on purpose: each
// query value and each weight exp(s - m) rounded to bf16, m the maximum of the vector's scores in
// each segment of kKeySegment positions, whose results are then combined in float64.
std::vector<double> Reference(const Shape& s, const Inputs& in, bool bf16_products = false) {
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
        for (int e = 0; e < s.hd; ++e) {
          const float q = in.q[p * qw + h * s.hd + e];
          d += double(bf16_products ? RoundToBf16(q) : q) * in.k[j * kw + kvh * s.hd + e];
        }
        sc.push_back(d);
      }
      double sum = 0;
      if (bf16_products) {
        std::vector<double> seg_max(last / kKeySegment + 1, -INFINITY);
        for (int64_t j = first; j <= last; ++j) {
          seg_max[j / kKeySegment] = std::max(seg_max[j / kKeySegment], sc[j - first]);
        }
        const double mx = *std::max_element(seg_max.begin(), seg_max.end());
        for (int64_t j = first; j <= last; ++j) {
          const double m = seg_max[j / kKeySegment];
          double& x = sc[j - first];
          sum += (x = RoundToBf16(static_cast<float>(std::exp(x - m))) * std::exp(m - mx));
        }
      } else {
        const double mx = *std::max_element(sc.begin(), sc.end());
        for (double& x : sc) sum += (x = std::exp(x - mx));
      }
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

// The vdpbf16ps path against the float64 reference that rounds what it rounds: what is left is fp32
// accumulation (~1e-7) and, rarely, a weight that the two exps round to neighbouring bf16 values
// (one bf16 step of one weight: below 4e-3 here). A pair packed wrong or a weight left out is off by
// 1e-2 and more, as is the unrounded reference (2-5e-2 here: the bf16 tier's error, not this one's).
TEST(AttentionTest, Bf16PairsMatchTheirFloat64Reference) {
  if (!CpuSupportsAvx512Bf16()) GTEST_SKIP() << "no AVX-512 BF16 here";
  for (const Shape& s : Shapes()) {
    const Inputs in = MakeInputs(s, Precision::kBf16, 7);
    const std::vector<double> ref = Reference(s, in, /*bf16_products=*/true);
    const std::vector<double> exact = Reference(s, in);
    Split split{1, 1000};
    split.bf16_dot = true;
    const std::vector<float> got = RunSequence(s, Precision::kBf16, in, Chunks(s.tokens, {s.tokens}), split);
    double worst = 0, sum = 0, worst_exact = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, std::abs(ref[i] - got[i]));
      sum += std::abs(ref[i] - got[i]);
      worst_exact = std::max(worst_exact, std::abs(exact[i] - got[i]));
    }
    const std::string shape = "heads " + std::to_string(s.heads) + " hd " + std::to_string(s.hd);
    EXPECT_LT(worst, 4e-3) << shape;
    EXPECT_LT(sum / ref.size(), 1e-6) << shape;
    EXPECT_LT(worst_exact, 0.1) << shape;  // and the bf16 roundings stay what they are
  }
}

TEST(AttentionTest, BitIdenticalWhateverTheChunkingRowsHeadsAndPath) {
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
   for (bool dot : DotPaths(precision)) {
    for (const Shape& s : Shapes()) {
      const Inputs in = MakeInputs(s, precision, 11);
      const int group = s.heads / s.kv_heads;
      // One call per GQA group and chunk: many query vectors, so bf16 rows are widened first.
      const std::vector<float> base = RunSequence(s, precision, in, {s.tokens}, {group, s.tokens, 0, true, dot});
      struct Variant {
        std::vector<int64_t> chunks;
        Split split;
      };
      std::vector<Variant> variants = {
          {{s.tokens}, {1, 3, 0, true, dot}},  // rows and heads split differently
          {{s.tokens}, {group, 5, 0, true, dot}},
          {{s.tokens}, {group, s.tokens, 0, /*avx512=*/false, dot}},  // 256-bit registers where 512 would run
          {{s.tokens}, {1, 1, 0, /*avx512=*/false, dot}},             // the same, bf16 rows read in place
      };
      if (s.images.empty()) {
        variants.push_back({Chunks(s.tokens, {1}), {group, 1, 0, true, dot}});  // decode: one token at a time
        // decode with the keys split across (would-be) threads, one and three segments a call
        variants.push_back({Chunks(s.tokens, {1}), {group, 1, 1, true, dot}});
        variants.push_back({Chunks(s.tokens, {1}), {group, 1, 3, true, dot}});
        variants.push_back({Chunks(s.tokens, {2, 1}), {1, 2, 2, true, dot}});
        // one vector per call: bf16 rows read in place
        variants.push_back({Chunks(s.tokens, {1}), {1, 1, 0, true, dot}});
        variants.push_back({Chunks(s.tokens, {7, 3, 11}), {group, 2, 0, true, dot}});
        // odd chunk edges: the pairs of keys straddle them
        variants.push_back({Chunks(s.tokens, {3, 5}), {1, 3, 0, true, dot}});
        // 7 vectors a call (one head, 7 rows): the decode-shaped kernels with a query pair missing its second
        variants.push_back({Chunks(s.tokens, {7}), {1, 7, 0, true, dot}});
      } else {  // chunk edges that keep each block whole: at every block's begin and end
        std::vector<int64_t> cuts = {0, s.tokens};
        for (const PositionRange& b : s.images) cuts.insert(cuts.end(), {b.begin, b.end});
        std::sort(cuts.begin(), cuts.end());
        std::vector<int64_t> sizes;
        for (size_t i = 1; i < cuts.size(); ++i) {
          if (cuts[i] > cuts[i - 1]) sizes.push_back(cuts[i] - cuts[i - 1]);
        }
        variants.push_back({sizes, {group, 4, 0, true, dot}});
        variants.push_back({sizes, {1, 4, 1, true, dot}});
      }
      for (const Variant& v : variants) {
        const std::vector<float> got = RunSequence(s, precision, in, v.chunks, v.split);
        ASSERT_EQ(got.size(), base.size());
        EXPECT_EQ(std::memcmp(got.data(), base.data(), sizeof(float) * got.size()), 0)
            << "heads " << s.heads << " hd " << s.hd << " window " << s.window << " chunks " << v.chunks.size()
            << " heads/call " << v.split.heads_per_call << " rows/call " << v.split.rows_per_call
            << " segments/call " << v.split.segments_per_call << " bf16 pairs " << dot;
      }
    }
   }
  }
}

}  // namespace
}  // namespace layerpipe
