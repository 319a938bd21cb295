// Pillow's bicubic resize (libImaging/Resample.c, 8 bits per channel), written again so that the pixels
// are Pillow's: the same double-precision coefficients (filter support widened by the downscale factor,
// bounds rounded as Pillow rounds them, weights normalised per output pixel), the same conversion to
// 22-bit fixed point, the same rounding bias and clamping, horizontal pass first over the rows the
// vertical pass reads. Compiled with -ffp-contract=off (CMakeLists.txt): Debian's Pillow is built for
// baseline x86-64, without fused multiply-adds, and one fused rounding can move a weight by an ulp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/media/image.h"

namespace layerpipe {
namespace {

// 8 bits for the result and 2 of headroom: bicubic weights go negative and sum past 1 in between.
constexpr int kPrecisionBits = 32 - 8 - 2;

double Bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// Weights are computed for a run of output pixels at a time, at most this many: the table is
// out_size x ksize, and ksize grows with the downscale factor (an extreme-aspect 50,000,000 x 1 PNG,
// within the pixel limit, would need 800 MB at once).
constexpr int64_t kMaxWeightsAtOnce = 1 << 20;

struct Coefficients {
  int ksize = 0;
  int begin = 0;                  // the first output pixel described
  std::vector<int> first, count;  // per output pixel: first input pixel and how many it reads
  std::vector<int32_t> weights;   // [out - begin][ksize], fixed point
};

// Pillow's precompute_coeffs for the box (0, 0, in_size), whose in0/in1 are floats, and its
// normalize_coeffs_8bpc; for output pixels [begin, end) only.
struct Filter {
  int in_size, out_size, ksize;
  double scale, filterscale, support;
  Filter(int in, int out) : in_size(in), out_size(out) {
    const float in0 = 0.0f, in1 = static_cast<float>(in);
    scale = static_cast<double>(in1 - in0) / out;
    filterscale = scale < 1.0 ? 1.0 : scale;
    support = 2.0 * filterscale;
    ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  }
  double Center(int xx) const { return 0.0f + (xx + 0.5) * scale; }
  int First(int xx) const {
    const int xmin = static_cast<int>(Center(xx) - support + 0.5);
    return xmin < 0 ? 0 : xmin;
  }
  int End(int xx) const {
    const int xmax = static_cast<int>(Center(xx) + support + 0.5);
    return xmax > in_size ? in_size : xmax;
  }
  // How many output pixels to describe at once.
  int Chunk() const { return static_cast<int>(std::max<int64_t>(1, kMaxWeightsAtOnce / ksize)); }

  Coefficients Precompute(int begin, int end) const {
    Coefficients c;
    c.ksize = ksize;
    c.begin = begin;
    c.first.resize(end - begin);
    c.count.resize(end - begin);
    c.weights.assign(static_cast<size_t>(end - begin) * ksize, 0);
    std::vector<double> k(ksize);
    for (int xx = begin; xx < end; ++xx) {
      const double center = Center(xx);
      const double ss = 1.0 / filterscale;
      const int xmin = First(xx);
      const int xmax = End(xx) - xmin;
      double ww = 0.0;
      for (int x = 0; x < xmax; ++x) {
        const double w = Bicubic((x + xmin - center + 0.5) * ss);
        k[x] = w;
        ww += w;
      }
      for (int x = 0; x < xmax; ++x) {
        if (ww != 0.0) k[x] /= ww;
      }
      int32_t* out = &c.weights[static_cast<size_t>(xx - begin) * ksize];
      for (int x = 0; x < xmax; ++x) {
        out[x] = k[x] < 0 ? static_cast<int32_t>(-0.5 + k[x] * (1 << kPrecisionBits))
                          : static_cast<int32_t>(0.5 + k[x] * (1 << kPrecisionBits));
      }
      c.first[xx - begin] = xmin;
      c.count[xx - begin] = xmax < 0 ? 0 : xmax;
    }
    return c;
  }
};

uint8_t Clip8(int32_t v) {
  v >>= kPrecisionBits;  // arithmetic shift, as Pillow's clip8 lookup index
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// Rows [row0, row0 + rows) of `in`, resampled to `width` columns.
void Horizontal(const RgbImage& in, int64_t row0, int64_t rows, const Filter& f, uint8_t* out) {
  const int width = f.out_size;
  for (int begin = 0; begin < width; begin += f.Chunk()) {
    const Coefficients c = f.Precompute(begin, std::min(width, begin + f.Chunk()));
    for (int64_t y = 0; y < rows; ++y) {
      const uint8_t* src = in.rgb.data() + (row0 + y) * in.width * 3;
      uint8_t* dst = out + y * width * 3;
      for (size_t i = 0; i < c.first.size(); ++i) {
        const int32_t* k = &c.weights[i * c.ksize];
        const uint8_t* p = src + static_cast<int64_t>(c.first[i]) * 3;
        int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
        for (int x = 0; x < c.count[i]; ++x, p += 3) {
          s0 += p[0] * k[x];
          s1 += p[1] * k[x];
          s2 += p[2] * k[x];
        }
        uint8_t* d = dst + 3 * (begin + static_cast<int64_t>(i));
        d[0] = Clip8(s0);
        d[1] = Clip8(s1);
        d[2] = Clip8(s2);
      }
    }
  }
}

// `in` holds rows from row_offset on. Each output value sums the same products in the same order as
// Pillow's loop; the loops are only interchanged so that memory is read row by row.
void Vertical(const uint8_t* in, int64_t width, int64_t row_offset, const Filter& f, uint8_t* out) {
  const int64_t n = width * 3;
  std::vector<int32_t> acc(n);
  for (int begin = 0; begin < f.out_size; begin += f.Chunk()) {
    const Coefficients c = f.Precompute(begin, std::min(f.out_size, begin + f.Chunk()));
    for (size_t i = 0; i < c.first.size(); ++i) {
      std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
      const int32_t* k = &c.weights[i * c.ksize];
      for (int y = 0; y < c.count[i]; ++y) {
        const uint8_t* src = in + (c.first[i] - row_offset + y) * n;
        const int32_t kv = k[y];
        for (int64_t j = 0; j < n; ++j) acc[j] += src[j] * kv;
      }
      uint8_t* dst = out + (begin + static_cast<int64_t>(i)) * n;
      for (int64_t j = 0; j < n; ++j) dst[j] = Clip8(acc[j]);
    }
  }
}

}  // namespace

RgbImage ResizeBicubic(const RgbImage& in, int64_t height, int64_t width) {
  constexpr int64_t kMaxSide = std::numeric_limits<int>::max() / 8;  // Pillow's sizes are ints
  if (height <= 0 || width <= 0 || height > kMaxSide || width > kMaxSide || in.width <= 0 || in.height <= 0 ||
      in.width > kMaxSide || in.height > kMaxSide ||
      static_cast<int64_t>(in.rgb.size()) != in.width * in.height * 3) {
    return {};
  }
  if (height == in.height && width == in.width) return in;
  const Filter horizontal(static_cast<int>(in.width), static_cast<int>(width));
  const Filter vertical(static_cast<int>(in.height), static_cast<int>(height));
  RgbImage out;
  out.width = width;
  out.height = height;
  out.rgb.resize(static_cast<size_t>(width * height * 3));
  if (width == in.width) {  // Pillow skips the pass whose size does not change
    Vertical(in.rgb.data(), in.width, 0, vertical, out.rgb.data());
    return out;
  }
  if (height == in.height) {
    Horizontal(in, 0, in.height, horizontal, out.rgb.data());
    return out;
  }
  // The horizontal pass covers only the rows the vertical pass reads.
  const int64_t row0 = vertical.First(0);
  const int64_t row1 = vertical.End(static_cast<int>(height) - 1);
  std::vector<uint8_t> temp(static_cast<size_t>((row1 - row0) * width * 3));
  Horizontal(in, row0, row1 - row0, horizontal, temp.data());
  Vertical(temp.data(), width, row0, vertical, out.rgb.data());
  return out;
}

}  // namespace layerpipe
