// Throughput of the CPU matmul kernels on the Gemma 4 12B projection shapes.
//
// Prints the machine's sustained read bandwidth, the thread pool's per-call overhead, GB/s of weight
// bytes for decode shapes (m = 1..8, memory-bound; held to a plain read of the same bytes timed alongside
// the same way, on the widest loads the CPU has) and GFLOP/s for prefill shapes (m = 64..4096, compute-bound; held to the vdpbf16ps or
// FMA peak measured alongside each row), in both precision modes, on the weights stored tiled
// (engine/model/tiled_rows.h), as a CPU stage loads them into huge pages, and row-major, as it reads them
// with --huge-pages=false.
//
// Usage: bench_matmul [--quick] [--isa=avx2|avx512f|avx512bf16] [--decode-only] [--prefill-only] [--small-pages]
//                     [--shape=NAME] [--m=ROWS]   (one table row: a shape's name as printed, one row count)
// Weights and the bandwidth probe's buffer are in huge pages, as the engine loads weights, unless --small-pages.
// Threads: $LAYERPIPE_THREADS (default: all hardware threads).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_peaks.h"
#include "engine/model/bf16.h"
#include "engine/model/huge_pages.h"
#include "engine/model/tiled_rows.h"
#include "engine/cpu/aligned_vector.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/thread_pool.h"

namespace layerpipe {
namespace {

using bench::BestTime;
using bench::MeasurePeaks;
using bench::Now;
using bench::Peak;
using bench::Peaks;
using bench::RunPeakLoop;

// Memory where the engine keeps its weights: in huge pages (HugePageBuffer, as the CPU stage copies its
// weights at load), or in ordinary heap pages with --small-pages (the engine's --huge_pages=false).
template <typename T>
class PagedArray {
 public:
  PagedArray(size_t count, bool huge_pages) {
    if (huge_pages) {
      absl::StatusOr<std::unique_ptr<HugePageBuffer>> buffer = HugePageBuffer::Allocate(count * sizeof(T));
      if (buffer.ok()) huge_ = *std::move(buffer);
    }
    if (huge_ == nullptr) heap_.resize(count);
  }
  T* data() { return huge_ ? reinterpret_cast<T*>(huge_->data()) : heap_.data(); }
  // What the kernel backs with huge pages now: THP may be off, or refuse part of the range.
  size_t huge_bytes() const { return huge_ ? huge_->huge_bytes() : 0; }

 private:
  std::unique_ptr<HugePageBuffer> huge_;
  std::vector<T> heap_;
};

// Sum of floats [b, e) of `buf` (b, e multiples of 64): a plain sequential read, one stream, as fast
// as a core issues loads. With AVX-512 the loads are whole 64-byte lines: on a 2-core Emerald Rapids VM
// 256-bit loads read 24-25 GB/s where 512-bit ones read 29-31 (a line per load leaves the core room
// for twice the misses in flight), and the kernels' decode loads 512 bits, so that is its roof.
__attribute__((target("avx512f"))) float ReadSum512(const float* buf, int64_t b, int64_t e) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = b; i < e; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(buf + i));
    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(buf + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(buf + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(buf + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

float ReadSum256(const float* buf, int64_t b, int64_t e) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = b; i < e; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(buf + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(buf + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(buf + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(buf + i + 24));
  }
  return _mm256_cvtss_f32(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

float ReadSum(const float* buf, int64_t b, int64_t e) {
  static const bool wide = CpuSupportsAvx512F();
  return wide ? ReadSum512(buf, b, e) : ReadSum256(buf, b, e);
}

// One read of `floats` floats of `buf`, split over the pool's threads. Each thread stores its sum to a
// volatile so that the loads stay.
void ReadOnce(ThreadPool& pool, const float* buf, int64_t floats) {
  static volatile float sink[256];
  pool.ParallelFor(pool.size(), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = floats * t / pool.size() / 64 * 64, e = floats * (t + 1) / pool.size() / 64 * 64;
      sink[t % 256] = ReadSum(buf, b, e);
    }
  });
}

// Streaming read of a buffer much larger than the last-level cache, split over the pool's threads.
// Also reports how much of the buffer the kernel backed with huge pages.
double ReadBandwidthGBs(ThreadPool& pool, size_t bytes, int reps, bool huge_pages, size_t* huge_bytes) {
  const size_t floats = bytes / sizeof(float);
  PagedArray<float> buf(floats, huge_pages);
  pool.ParallelFor(static_cast<int64_t>(floats), [&](int64_t b, int64_t e) {  // first touch per thread
    std::fill(buf.data() + b, buf.data() + e, 1.0f);
  });
  const double t = BestTime(reps, [&] { ReadOnce(pool, buf.data(), static_cast<int64_t>(floats)); });
  *huge_bytes = buf.huge_bytes();
  return bytes / t / 1e9;
}

double PoolOverheadUs(ThreadPool& pool, int calls) {
  std::vector<int64_t> sink(pool.size() * 16);
  const double t0 = Now();
  for (int i = 0; i < calls; ++i) {
    pool.ParallelFor(pool.size(), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) sink[t * 16] += t;
    });
  }
  return (Now() - t0) / calls * 1e6;
}

struct Shape {
  const char* name;
  int64_t n, k;
  bool decode_only = false;  // a prefill of it would take minutes a row
};

struct Options {
  bool quick = false;
  bool decode = true;
  bool prefill = true;
  bool huge_pages = true;
  std::string shape;  // only this shape, when set
  int64_t rows = 0;   // only this m, when set
  MatmulIsa isa = ActiveMatmulIsa();
};

// The modes a table compares: bf16-x and fp32-x mode on the weights stored tiled (engine/model/
// tiled_rows.h: what a CPU stage runs), then both on row-major weights (--huge-pages=false).
constexpr int kModes = 4;
constexpr const char* kModeNames[kModes] = {"tiled bf16-x", "tiled fp32-x", "row bf16-x", "row fp32-x"};
constexpr bool ModeIsBf16(int mode) { return mode % 2 == 0; }

void Multiply(const Options& opt, int mode, const float* x, int64_t m, const Shape& s, const uint16_t* w,
              const uint16_t* w_tiled, float* y, ThreadPool& pool) {
  if (mode < 2) {
    MatmulWithIsa(opt.isa, x, m, WeightMatrix::Bf16(w_tiled, s.n, s.k, WeightLayout::kTiled), y, pool, ModeIsBf16(mode));
  } else {
    MatmulWithIsa(opt.isa, x, m, WeightMatrix::Bf16(w, s.n, s.k), y, pool, ModeIsBf16(mode));
  }
}

void PrintModeNames() {
  for (const char* name : kModeNames) std::printf(" %15s", name);
}

// Best time of each mode over `rounds`, the modes taking turns within a round, so that a neighbour's
// load on a shared machine weighs on them alike.
template <typename Fn, size_t N>
void BestTimes(int modes, int rounds, Fn&& run_mode, double (&best)[N]) {
  for (double& t : best) t = 1e30;
  for (int r = 0; r < rounds; ++r) {
    for (int mode = 0; mode < modes; ++mode) {
      best[mode] = std::min(best[mode], BestTime(1, [&] { run_mode(mode); }));
    }
  }
}

void PrintCells(const double (&v)[kModes], const double (&peak)[kModes]) {
  for (int mode = 0; mode < kModes; ++mode) std::printf(" %8.1f (%3.0f%%)", v[mode], 100 * v[mode] / peak[mode]);
}

PagedArray<uint16_t> TiledCopy(PagedArray<uint16_t>& w, const Shape& s, const Options& opt) {
  PagedArray<uint16_t> t(static_cast<size_t>(s.n * s.k), opt.huge_pages);
  std::copy(w.data(), w.data() + s.n * s.k, t.data());
  TileRowsInPlace(t.data(), s.n, s.k);
  return t;
}

// Real 12B projections: y = x · Wᵀ with W [n, k]; the tied head (the embedding, 2 GB: the largest read
// of a decode step) for decode.
constexpr Shape kShapes[] = {
    {"q_proj", 4096, 3840},        {"k_proj", 2048, 3840},      {"o_proj", 3840, 4096},
    {"gate/up_proj", 15360, 3840}, {"down_proj", 3840, 15360}, {"lm_head", 262144, 3840, true},
};

PagedArray<uint16_t> RandomBf16(size_t count, bool huge_pages, std::mt19937& rng) {
  PagedArray<uint16_t> w(count, huge_pages);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  for (size_t i = 0; i < count; ++i) w.data()[i] = F32ToBf16(dist(rng));
  return w;
}

std::vector<float> RandomF32(size_t count, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(count);
  for (auto& e : v) e = dist(rng);
  return v;
}

// A shape's weights, row-major and tiled, in enough copies that cycling through them defeats the
// 32 MiB L3, as real layers do (every layer's matrices are read again at each step or chunk). Timed
// on one copy, a 64-row prefill of q_proj, k_proj or o_proj could find part of its weights still in L3
// from the call before (two modes read the same tiled bytes back to back), which a model never does.
// The copies after the first are byte copies: the values do not change the timings. A matrix of 256 MiB
// or more (the tied head) defeats L3 alone and has one.
struct WeightCopies {
  std::vector<PagedArray<uint16_t>> row_major, tiled;
  int next = 0;

  WeightCopies(const Shape& s, const Options& opt, std::mt19937& rng) {
    const size_t elems = static_cast<size_t>(s.n * s.k), l3_defeat = size_t{256} << 20;
    const int copies = static_cast<int>(std::max<size_t>(elems * 2 >= l3_defeat ? 1 : 2, l3_defeat / (elems * 2)));
    row_major.push_back(RandomBf16(elems, opt.huge_pages, rng));
    tiled.push_back(TiledCopy(row_major.back(), s, opt));
    for (int c = 1; c < copies; ++c) {
      row_major.emplace_back(elems, opt.huge_pages);
      std::copy(row_major[0].data(), row_major[0].data() + elems, row_major.back().data());
      tiled.emplace_back(elems, opt.huge_pages);
      std::copy(tiled[0].data(), tiled[0].data() + elems, tiled.back().data());
    }
  }
  int size() const { return static_cast<int>(row_major.size()); }
  // The copy to read next; each call moves on.
  int Advance() {
    const int c = next;
    next = (next + 1) % size();
    return c;
  }
};


// Decode is held to the read bandwidth of a plain pass over a copy of the same bytes, timed like the
// kernels (the best single call, taking turns with them, cycling through the copies): the 1 GiB
// figure above is a sustained rate, which a best call of ~30 MB beats by 10-30 % on a shared VM.
void RunDecode(const Options& opt, ThreadPool& pool, std::mt19937& rng) {
  std::printf("\n== decode (memory-bound): GB/s of bf16 weight bytes read ==\n");
  std::printf("%-13s %6s %6s %3s %9s", "shape", "n", "k", "m", "read GB/s");
  PrintModeNames();
  std::printf("  (GB/s, %% of that read)\n");
  const int64_t ms[] = {1, 2, 4, 8};
  for (const Shape& s : kShapes) {
    if (!opt.shape.empty() && opt.shape != s.name) continue;
    const size_t w_elems = static_cast<size_t>(s.n * s.k);
    WeightCopies w(s, opt, rng);
    const int copies = w.size();
    for (int64_t m : ms) {
      if (opt.quick && m != 1 && m != 8) continue;
      const std::vector<float> x = RandomF32(m * s.k, rng);
      AlignedVector<float> y(m * s.n);  // as the CPU backend keeps its activations
      const int modes = kModes, read = modes;  // the read takes the last turn of a round
      double t[kModes + 1];
      BestTimes(modes + 1, opt.quick ? 2 * copies : 4 * copies, [&](int mode) {
        const int c = w.Advance();
        if (mode == read) {
          ReadOnce(pool, reinterpret_cast<const float*>(w.row_major[c].data()), static_cast<int64_t>(w_elems / 2));
        } else {
          Multiply(opt, mode, x.data(), m, s, w.row_major[c].data(), w.tiled[c].data(), y.data(), pool);
        }
      }, t);
      const double read_gbs = w_elems * 2 / t[read] / 1e9;
      double gbs[kModes], roof[kModes];
      for (int mode = 0; mode < kModes; ++mode) {
        gbs[mode] = w_elems * 2 / t[mode] / 1e9;
        roof[mode] = read_gbs;
      }
      std::printf("%-13s %6lld %6lld %3lld %9.1f", s.name, static_cast<long long>(s.n), static_cast<long long>(s.k),
                  static_cast<long long>(m), read_gbs);
      PrintCells(gbs, roof);
      std::printf("\n");
    }
  }
}

// Rounds for one prefill row: enough for about a second of calls (at least 3, at most 20), timed by
// one warm-up round. A best of 3 calls of a few ms (64 rows) swung by 5-10 points from run to run on
// a shared VM, whose neighbours take memory bandwidth for seconds at a time.
template <typename Fn>
int PrefillRounds(int modes, Fn&& run_mode) {
  const double t0 = Now();
  for (int mode = 0; mode < modes; ++mode) run_mode(mode);
  return static_cast<int>(std::clamp(1.0 / std::max(Now() - t0, 1e-6), 3.0, 20.0));
}

// Prefill is held to the peak of the instruction its mode runs on (vdpbf16ps where that kernel runs,
// else the fused multiply-add of the column order: 512-bit unless the kernel is avx2), measured alongside each row:
// a short peak loop takes a turn in every round, so a neighbour's minute on a shared VM (which cut
// every mode, compute-bound ones too, by up to a sixth) weighs on the kernels and their ceiling alike.
void RunPrefill(const Options& opt, ThreadPool& pool, std::mt19937& rng) {
  std::printf("\n== prefill (compute-bound): GFLOP/s (2*m*n*k per call) ==\n");
  const Peak fma_kind = opt.isa != MatmulIsa::kAvx2 && CpuSupportsAvx512F() ? Peak::kFma512 : Peak::kFma;
  const Peak bf16_kind = opt.isa == MatmulIsa::kAvx512Bf16 ? Peak::kBf16Dot : fma_kind;
  constexpr int64_t kPeakIters = int64_t{1} << 20;  // ~4 ms a call
  std::printf("%-13s %6s %6s %4s", "shape", "n", "k", "m");
  PrintModeNames();
  std::printf("  (GFLOP/s, %% of the peaks alongside: bf16-x, fp32-x GFLOP/s)\n");
  std::vector<int64_t> ms = {64, 256, 512, 4096};
  if (opt.rows > 0) ms = {opt.rows};  // any row count, for finding where a path's crossover lies
  for (const Shape& s : kShapes) {
    if (s.decode_only || (!opt.shape.empty() && opt.shape != s.name)) continue;
    WeightCopies w(s, opt, rng);
    for (int64_t m : ms) {
      if (opt.quick && m != 256 && m != 4096) continue;
      const std::vector<float> x = RandomF32(m * s.k, rng);
      AlignedVector<float> y(m * s.n);  // as the CPU backend keeps its activations
      const int modes = kModes, bf16_turn = modes, fma_turn = modes + 1;
      double peak_flops[2] = {};
      auto run = [&](int mode) {
        if (mode == bf16_turn || mode == fma_turn) {
          peak_flops[mode - bf16_turn] = RunPeakLoop(pool, mode == bf16_turn ? bf16_kind : fma_kind, kPeakIters);
        } else {
          const int c = w.Advance();
          Multiply(opt, mode, x.data(), m, s, w.row_major[c].data(), w.tiled[c].data(), y.data(), pool);
        }
      };
      double t[kModes + 2];
      BestTimes(modes + 2, opt.quick ? 2 : PrefillRounds(modes, run), run, t);
      const double bf16_peak = peak_flops[0] / t[bf16_turn] / 1e9, fma_peak = peak_flops[1] / t[fma_turn] / 1e9;
      double gflops[kModes];
      for (int mode = 0; mode < kModes; ++mode) gflops[mode] = 2.0 * m * s.n * s.k / t[mode] / 1e9;
      double peak[kModes];
      for (int mode = 0; mode < kModes; ++mode) peak[mode] = ModeIsBf16(mode) ? bf16_peak : fma_peak;
      std::printf("%-13s %6lld %6lld %4lld", s.name, static_cast<long long>(s.n), static_cast<long long>(s.k),
                  static_cast<long long>(m));
      PrintCells(gflops, peak);
      std::printf("  (%.0f, %.0f)\n", bf16_peak, fma_peak);
    }
  }
}

int Main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      opt.quick = true;
    } else if (a == "--isa=avx2") {
      opt.isa = MatmulIsa::kAvx2;
    } else if (a == "--isa=avx512f" && CpuSupportsAvx512F()) {
      opt.isa = MatmulIsa::kAvx512F;
    } else if (a == "--isa=avx512bf16" && CpuSupportsAvx512Bf16()) {
      opt.isa = MatmulIsa::kAvx512Bf16;
    } else if (a == "--decode-only") {
      opt.prefill = false;
    } else if (a == "--prefill-only") {
      opt.decode = false;
    } else if (a == "--small-pages") {
      opt.huge_pages = false;
    } else if (a.rfind("--shape=", 0) == 0) {
      opt.shape = a.substr(8);
    } else if (a.rfind("--m=", 0) == 0 && std::atoll(a.c_str() + 4) > 0) {
      opt.rows = std::atoll(a.c_str() + 4);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--isa=avx2|avx512f|avx512bf16] [--decode-only] [--prefill-only] [--small-pages]\n"
                   "          [--shape=q_proj|k_proj|o_proj|gate/up_proj|down_proj] [--m=ROWS]\n"
                   "(an --isa this CPU lacks is refused)\n",
                   argv[0]);
      return 2;
    }
  }
  ThreadPool& pool = DefaultThreadPool();
  std::printf("threads: %d   kernel (bf16-x mode): %s   avx512f / avx512bf16 on this CPU: %s / %s\n",
              pool.size(), std::string(MatmulIsaName(opt.isa)).c_str(), CpuSupportsAvx512F() ? "yes" : "no",
              CpuSupportsAvx512Bf16() ? "yes" : "no");
  std::printf("fp32-x mode: the column order's fused multiply-adds (on 512-bit registers unless the kernel is avx2);"
              " their prefill widens the weights: %s ($LAYERPIPE_MATMUL_WIDEN=registers|block)\n",
              std::string(MatmulWideningName(ActiveMatmulWidening())).c_str());
  size_t huge_bytes = 0;
  const double bandwidth = ReadBandwidthGBs(pool, size_t{1} << 30, opt.quick ? 3 : 5, opt.huge_pages, &huge_bytes);
  const Peaks peaks = MeasurePeaks(pool);
  std::printf("streaming read bandwidth (1 GiB, %d threads, %zu MiB of it in huge pages): %.1f GB/s\n", pool.size(),
              huge_bytes >> 20, bandwidth);
  std::printf("peak (%d threads): fp32 FMA %.1f GFLOP/s", pool.size(), peaks.fma);
  if (peaks.fma512 > 0) std::printf(", 512-bit fp32 FMA %.1f GFLOP/s", peaks.fma512);
  if (peaks.bf16_dot > 0) std::printf(", vdpbf16ps %.1f GFLOP/s", peaks.bf16_dot);
  std::printf("\n");
  std::printf("ParallelFor overhead (empty body): %.2f us/call\n", PoolOverheadUs(pool, 20000));
  std::mt19937 rng(1234);
  if (opt.decode) RunDecode(opt, pool, rng);
  if (opt.prefill) RunPrefill(opt, pool, rng);
  return 0;
}

}  // namespace
}  // namespace layerpipe

int main(int argc, char** argv) { return layerpipe::Main(argc, argv); }
