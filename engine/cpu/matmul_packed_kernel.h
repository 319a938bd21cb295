// The quantized formats' loops (int8 and int4: kBits of a value), shared by their AVX2 and AVX-512F
// kernels (matmul_packed_avx2.cc, matmul_packed_avx512f.cc), which include this file inside their
// anonymous namespace after defining
//   LP_PACKED_TARGET  the target attribute of every function here, and
//   struct Vec      the ISA's operations: kLanes; F, I; Zero(); LoadRaw(const int8_t*) (kLanes rows' words);
//                   Value<kBits, i>(I) (value i of each row's word, sign-extended and widened to fp32);
//                   Scales(const uint16_t*) (kLanes bf16 widened); Mul; Fma(const float* x, F w, F acc)
//                   (acc + *x · w, fused); Load(const float*, int valid); Store(float*, F, int valid).
// The order is the column order of matmul_kernels.h: output (i, j) is one lane's chain of fused
// multiply-adds over k in increasing order from +0, acc = fma(x[i][k], q[j][k] · s[j][k / 32], acc),
// where the product q · s is exact in fp32 (at most 7 + 8 significant bits). So the result is that of
// a scalar loop over the dequantized weights, on either ISA, in decode and prefill alike (prefill carries
// a chain's partial sums through y between chunks of k, exactly).

#define LP_PACKED_INLINE LP_PACKED_TARGET __attribute__((always_inline)) inline

constexpr int kVecsPerRowGroup = kPackedTileRows / Vec::kLanes;
constexpr int64_t kLineBytes = 4 * kPackedTileRows;  // a row group's words for the same values of k
template <int kBits>
constexpr int kPerWord = 32 / kBits;
template <int kBits>
constexpr int kLinesPerGroup = kQuantGroup / kPerWord<kBits>;

template <int kBits>
inline const int8_t* GroupValues(const PackedProblem& p, int64_t row_group) {
  return p.w + row_group * kPackedTileRows * p.kp * kBits / 8;
}
inline const uint16_t* GroupScales(const PackedProblem& p, int64_t row_group) {
  return p.scales + row_group * (p.kp / kQuantGroup) * kPackedTileRows;
}
// Valid output columns of vector v of the tile at column j.
inline int ValidLanes(const PackedProblem& p, int64_t j, int v) {
  return static_cast<int>(std::clamp<int64_t>(p.n - (j + v * Vec::kLanes), 0, Vec::kLanes));
}

// The dequantized weights q · s of a vector's rows for value i of their words.
template <int kBits, int kI>
LP_PACKED_INLINE typename Vec::F Dequantized(typename Vec::I raw, typename Vec::F scale) {
  return Vec::Mul(Vec::template Value<kBits, kI>(raw), scale);
}

// Decode (few rows): R rows of x against G row groups, dequantizing in registers as the weights stream.
template <int kBits, int R, int G>
struct DecodeTile {
  static constexpr int kV = G * kVecsPerRowGroup;
  // Values kI.. of the words: each vector's weights into every row's accumulators.
  template <int kI>
  LP_PACKED_INLINE static void Values(const float* x, int64_t ldx, const typename Vec::I (&raw)[kV],
                                      const typename Vec::F (&scale)[kV], typename Vec::F (&acc)[R][kV]) {
#pragma GCC unroll 8
    for (int v = 0; v < kV; ++v) {
      const typename Vec::F w = Dequantized<kBits, kI>(raw[v], scale[v]);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][v] = Vec::Fma(x + r * ldx + kI, w, acc[r][v]);
    }
    if constexpr (kI + 1 < kPerWord<kBits>) Values<kI + 1>(x, ldx, raw, scale, acc);
  }
  LP_PACKED_TARGET static void Run(const PackedProblem& p, int64_t i0, int64_t j) {
    typename Vec::F acc[R][kV];
    for (auto& row : acc) {
      for (auto& a : row) a = Vec::Zero();
    }
    const int8_t* values[G];
    const uint16_t* scales[G];
    for (int g = 0; g < G; ++g) {
      values[g] = GroupValues<kBits>(p, j / kPackedTileRows + g);
      scales[g] = GroupScales(p, j / kPackedTileRows + g);
    }
    const float* x = p.x + i0 * p.ldx;
    for (int64_t kg = 0; kg < p.kp / kQuantGroup; ++kg) {
      typename Vec::F scale[kV];
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v) {
        scale[v] = Vec::Scales(scales[v / kVecsPerRowGroup] + kg * kPackedTileRows + v % kVecsPerRowGroup * Vec::kLanes);
      }
#pragma GCC unroll 2
      for (int t = 0; t < kLinesPerGroup<kBits>; ++t) {
        const int64_t line = kg * kLinesPerGroup<kBits> + t;
        typename Vec::I raw[kV];
#pragma GCC unroll 4
        for (int v = 0; v < kV; ++v) {
          raw[v] = Vec::LoadRaw(values[v / kVecsPerRowGroup] + line * kLineBytes + v % kVecsPerRowGroup * Vec::kLanes * 4);
        }
        Values<0>(x + line * kPerWord<kBits>, p.ldx, raw, scale, acc);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < kV; ++v) {
        const int valid = ValidLanes(p, j, v);
        if (valid > 0) Vec::Store(p.y + (i0 + r) * p.n + j + v * Vec::kLanes, acc[r][v], valid);
      }
    }
  }
  static constexpr void (*kFn)(const PackedProblem&, int64_t, int64_t) = Run;
};

// Prefill: a chunk of G row groups' weights dequantized once into an fp32 block (value k of the chunk,
// then the tile's columns), which every row tile then reads.
constexpr int64_t kChunkValues = 256;

// Values kI.. of a vector's words, dequantized, into rows kI.. of out (rows `width` floats apart).
template <int kBits, int kI>
LP_PACKED_INLINE void StoreValues(typename Vec::I raw, typename Vec::F scale, float* out, int64_t width) {
  Vec::Store(out + kI * width, Dequantized<kBits, kI>(raw, scale), Vec::kLanes);
  if constexpr (kI + 1 < kPerWord<kBits>) StoreValues<kBits, kI + 1>(raw, scale, out, width);
}

template <int kBits>
LP_PACKED_TARGET inline void DequantizeChunk(const PackedProblem& p, int64_t j, int groups, int64_t k0, int64_t kc,
                                             float* block) {
  const int64_t width = groups * kPackedTileRows;
  for (int g = 0; g < groups; ++g) {
    const int8_t* values = GroupValues<kBits>(p, j / kPackedTileRows + g);
    const uint16_t* scales = GroupScales(p, j / kPackedTileRows + g);
    for (int64_t kg = k0 / kQuantGroup; kg < (k0 + kc) / kQuantGroup; ++kg) {
      for (int h = 0; h < kVecsPerRowGroup; ++h) {
        const typename Vec::F scale = Vec::Scales(scales + kg * kPackedTileRows + h * Vec::kLanes);
        for (int t = 0; t < kLinesPerGroup<kBits>; ++t) {
          const int64_t line = kg * kLinesPerGroup<kBits> + t;
          const typename Vec::I raw = Vec::LoadRaw(values + line * kLineBytes + h * Vec::kLanes * 4);
          float* out = block + (line * kPerWord<kBits> - k0) * width + g * kPackedTileRows + h * Vec::kLanes;
          StoreValues<kBits, 0>(raw, scale, out, width);
        }
      }
    }
  }
}

// R rows of x against a block of G row groups over values [k0, k0 + kc): the chains start at +0 for
// the first chunk and go on from y's partial sums after it.
template <int R, int G>
struct BlockTile {
  static constexpr int kV = G * kVecsPerRowGroup;
  LP_PACKED_TARGET static void Run(const PackedProblem& p, const float* block, int64_t i0, int64_t j, int64_t k0,
                                   int64_t kc) {
    typename Vec::F acc[R][kV];
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < kV; ++v) {
        acc[r][v] = k0 == 0 ? Vec::Zero() : Vec::Load(p.y + (i0 + r) * p.n + j + v * Vec::kLanes, ValidLanes(p, j, v));
      }
    }
    const float* x = p.x + i0 * p.ldx + k0;
    constexpr int64_t kWidth = G * kPackedTileRows;
    for (int64_t kk = 0; kk < kc; ++kk) {
      typename Vec::F w[kV];
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v) w[v] = Vec::Load(block + kk * kWidth + v * Vec::kLanes, Vec::kLanes);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
        for (int v = 0; v < kV; ++v) acc[r][v] = Vec::Fma(x + r * p.ldx + kk, w[v], acc[r][v]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < kV; ++v) {
        const int valid = ValidLanes(p, j, v);
        if (valid > 0) Vec::Store(p.y + (i0 + r) * p.n + j + v * Vec::kLanes, acc[r][v], valid);
      }
    }
  }
  static constexpr void (*kFn)(const PackedProblem&, const float*, int64_t, int64_t, int64_t, int64_t) = Run;
};

template <int R, int G>
using DecodeTile8 = DecodeTile<8, R, G>;
template <int R, int G>
using DecodeTile4 = DecodeTile<4, R, G>;

// y[:, j_begin:j_end) (j_begin a multiple of kPackedTileRows): decode tiles up to kDecodeRows rows, else
// the block path in tiles of kBlockRows rows.
template <int kBits>
LP_PACKED_TARGET inline void PackedColumns(const PackedProblem& p, int64_t j_begin, int64_t j_end) {
  if (p.m <= kDecodeRows) {
    constexpr auto kDecode = kBits == 8 ? TileTable<DecodeTile8, kDecodeRows, kDecodeGroups>()
                                        : TileTable<DecodeTile4, kDecodeRows, kDecodeGroups>();
    for (int64_t j = j_begin; j < j_end; j += kDecodeGroups * kPackedTileRows) {
      const int groups =
          static_cast<int>(std::min<int64_t>(kDecodeGroups, (j_end - j + kPackedTileRows - 1) / kPackedTileRows));
      kDecode[p.m - 1][groups - 1](p, 0, j);
    }
    return;
  }
  constexpr auto kBlock = TileTable<BlockTile, kBlockRows, kBlockGroups>();
  float* block = ThreadScratch<float, Slot::kWidenedWeights>(kChunkValues * kBlockGroups * kPackedTileRows);
  for (int64_t j = j_begin; j < j_end; j += kBlockGroups * kPackedTileRows) {
    const int groups =
        static_cast<int>(std::min<int64_t>(kBlockGroups, (j_end - j + kPackedTileRows - 1) / kPackedTileRows));
    for (int64_t k0 = 0; k0 < p.kp; k0 += kChunkValues) {
      const int64_t kc = std::min(kChunkValues, p.kp - k0);
      DequantizeChunk<kBits>(p, j, groups, k0, kc, block);
      for (int64_t i = 0; i < p.m; i += kBlockRows) {
        const int rows = static_cast<int>(std::min<int64_t>(kBlockRows, p.m - i));
        kBlock[rows - 1][groups - 1](p, block, i, j, k0, kc);
      }
    }
  }
}
