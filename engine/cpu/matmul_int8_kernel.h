// The int8 weight format's loops, shared by its AVX2 and AVX-512F kernels (matmul_int8_avx2.cc,
// matmul_int8_avx512f.cc), which include this file inside their anonymous namespace after defining
//   LP_INT8_TARGET  the target attribute of every function here, and
//   struct Vec      the ISA's operations: kLanes; F, I; Zero(); LoadRaw(const int8_t*) (kLanes rows' quads);
//                   Byte<i>(I) (value i of each row's quad, widened to fp32); Scales(const uint16_t*)
//                   (kLanes bf16 widened); Mul; Fma(const float* x, F w, F acc) (acc + *x · w, fused);
//                   Load(const float*, int valid); Store(float*, F, int valid) (the first `valid` lanes).
// The order is the column order of matmul_kernels.h: output (i, j) is one lane's chain of fused
// multiply-adds over k in increasing order from +0, acc = fma(x[i][k], q[j][k] · s[j][k / 32], acc),
// where the product q · s is exact in fp32 (at most 7 + 8 significant bits). So the result is that of
// a scalar loop over the dequantized weights, on either ISA, in decode and prefill alike (prefill carries
// a chain's partial sums through y between chunks of k, exactly).

#define LP_INT8_INLINE LP_INT8_TARGET __attribute__((always_inline)) inline

constexpr int kVecsPerRowGroup = kInt8TileRows / Vec::kLanes;
constexpr int64_t kQuadBytes = 4 * kInt8TileRows;
constexpr int kQuadsPerGroup = kQuantGroup / 4;

inline const int8_t* GroupValues(const Int8Problem& p, int64_t row_group) { return p.w + row_group * kInt8TileRows * p.kp; }
inline const uint16_t* GroupScales(const Int8Problem& p, int64_t row_group) {
  return p.scales + row_group * (p.kp / kQuantGroup) * kInt8TileRows;
}
// Valid output columns of vector v of the tile at column j.
inline int ValidLanes(const Int8Problem& p, int64_t j, int v) {
  return static_cast<int>(std::clamp<int64_t>(p.n - (j + v * Vec::kLanes), 0, Vec::kLanes));
}

// The dequantized weights q · s of vector v's rows for value i of a quad, given that quad's raw vector
// and the group's scales.
template <int kI>
LP_INT8_INLINE typename Vec::F Dequantized(typename Vec::I raw, typename Vec::F scale) {
  return Vec::Mul(Vec::template Byte<kI>(raw), scale);
}

// Decode (few rows): R rows of x against G row groups, dequantizing in registers as the weights stream.
template <int R, int G>
struct DecodeTile {
  static constexpr int kV = G * kVecsPerRowGroup;
  template <int kI>
  LP_INT8_INLINE static void Value(const float* x, int64_t ldx, const typename Vec::I (&raw)[kV],
                                   const typename Vec::F (&scale)[kV], typename Vec::F (&acc)[R][kV]) {
#pragma GCC unroll 8
    for (int v = 0; v < kV; ++v) {
      const typename Vec::F w = Dequantized<kI>(raw[v], scale[v]);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][v] = Vec::Fma(x + r * ldx + kI, w, acc[r][v]);
    }
  }
  LP_INT8_TARGET static void Run(const Int8Problem& p, int64_t i0, int64_t j) {
    typename Vec::F acc[R][kV];
    for (auto& row : acc) {
      for (auto& a : row) a = Vec::Zero();
    }
    const int8_t* values[G];
    const uint16_t* scales[G];
    for (int g = 0; g < G; ++g) {
      values[g] = GroupValues(p, j / kInt8TileRows + g);
      scales[g] = GroupScales(p, j / kInt8TileRows + g);
    }
    const float* x = p.x + i0 * p.ldx;
    for (int64_t kg = 0; kg < p.kp / kQuantGroup; ++kg) {
      typename Vec::F scale[kV];
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v) {
        scale[v] = Vec::Scales(scales[v / kVecsPerRowGroup] + kg * kInt8TileRows + v % kVecsPerRowGroup * Vec::kLanes);
      }
#pragma GCC unroll 2
      for (int t = 0; t < kQuadsPerGroup; ++t) {
        const int64_t quad = kg * kQuadsPerGroup + t;
        typename Vec::I raw[kV];
#pragma GCC unroll 4
        for (int v = 0; v < kV; ++v) {
          raw[v] = Vec::LoadRaw(values[v / kVecsPerRowGroup] + quad * kQuadBytes + v % kVecsPerRowGroup * Vec::kLanes * 4);
        }
        const float* xq = x + quad * 4;
        Value<0>(xq, p.ldx, raw, scale, acc);
        Value<1>(xq, p.ldx, raw, scale, acc);
        Value<2>(xq, p.ldx, raw, scale, acc);
        Value<3>(xq, p.ldx, raw, scale, acc);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < kV; ++v) {
        const int valid = ValidLanes(p, j, v);
        if (valid > 0) Vec::Store(p.y + (i0 + r) * p.n + j + v * Vec::kLanes, acc[r][v], valid);
      }
    }
  }
  static constexpr void (*kFn)(const Int8Problem&, int64_t, int64_t) = Run;
};

// Prefill: a chunk of G row groups' weights dequantized once into an fp32 block (value k of the chunk,
// then the tile's columns), which every row tile then reads.
constexpr int64_t kChunkValues = 256;

LP_INT8_TARGET inline void DequantizeChunk(const Int8Problem& p, int64_t j, int groups, int64_t k0, int64_t kc,
                                           float* block) {
  const int64_t width = groups * kInt8TileRows;
  for (int g = 0; g < groups; ++g) {
    const int8_t* values = GroupValues(p, j / kInt8TileRows + g);
    const uint16_t* scales = GroupScales(p, j / kInt8TileRows + g);
    for (int64_t kg = k0 / kQuantGroup; kg < (k0 + kc) / kQuantGroup; ++kg) {
      for (int h = 0; h < kVecsPerRowGroup; ++h) {
        const typename Vec::F scale = Vec::Scales(scales + kg * kInt8TileRows + h * Vec::kLanes);
        for (int t = 0; t < kQuadsPerGroup; ++t) {
          const int64_t quad = kg * kQuadsPerGroup + t;
          const typename Vec::I raw = Vec::LoadRaw(values + quad * kQuadBytes + h * Vec::kLanes * 4);
          float* out = block + (quad * 4 - k0) * width + g * kInt8TileRows + h * Vec::kLanes;
          Vec::Store(out, Dequantized<0>(raw, scale), Vec::kLanes);
          Vec::Store(out + width, Dequantized<1>(raw, scale), Vec::kLanes);
          Vec::Store(out + 2 * width, Dequantized<2>(raw, scale), Vec::kLanes);
          Vec::Store(out + 3 * width, Dequantized<3>(raw, scale), Vec::kLanes);
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
  LP_INT8_TARGET static void Run(const Int8Problem& p, const float* block, int64_t i0, int64_t j, int64_t k0,
                                 int64_t kc) {
    typename Vec::F acc[R][kV];
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < kV; ++v) {
        acc[r][v] = k0 == 0 ? Vec::Zero() : Vec::Load(p.y + (i0 + r) * p.n + j + v * Vec::kLanes, ValidLanes(p, j, v));
      }
    }
    const float* x = p.x + i0 * p.ldx + k0;
    constexpr int64_t kWidth = G * kInt8TileRows;
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
  static constexpr void (*kFn)(const Int8Problem&, const float*, int64_t, int64_t, int64_t, int64_t) = Run;
};

// y[:, j_begin:j_end) (j_begin a multiple of kInt8TileRows): decode tiles up to kDecodeRows rows, else
// the block path in tiles of kBlockRows rows.
LP_INT8_TARGET inline void Int8Columns(const Int8Problem& p, int64_t j_begin, int64_t j_end) {
  constexpr auto kDecode = TileTable<DecodeTile, kDecodeRows, kDecodeGroups>();
  constexpr auto kBlock = TileTable<BlockTile, kBlockRows, kBlockGroups>();
  if (p.m <= kDecodeRows) {
    for (int64_t j = j_begin; j < j_end; j += kDecodeGroups * kInt8TileRows) {
      const int groups = static_cast<int>(std::min<int64_t>(kDecodeGroups, (j_end - j + kInt8TileRows - 1) / kInt8TileRows));
      kDecode[p.m - 1][groups - 1](p, 0, j);
    }
    return;
  }
  float* block = ThreadScratch<float, Slot::kWidenedWeights>(kChunkValues * kBlockGroups * kInt8TileRows);
  for (int64_t j = j_begin; j < j_end; j += kBlockGroups * kInt8TileRows) {
    const int groups = static_cast<int>(std::min<int64_t>(kBlockGroups, (j_end - j + kInt8TileRows - 1) / kInt8TileRows));
    for (int64_t k0 = 0; k0 < p.kp; k0 += kChunkValues) {
      const int64_t kc = std::min(kChunkValues, p.kp - k0);
      DequantizeChunk(p, j, groups, k0, kc, block);
      for (int64_t i = 0; i < p.m; i += kBlockRows) {
        const int rows = static_cast<int>(std::min<int64_t>(kBlockRows, p.m - i));
        kBlock[rows - 1][groups - 1](p, block, i, j, k0, kc);
      }
    }
  }
}
