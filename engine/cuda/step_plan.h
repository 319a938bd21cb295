// Host-side planning of one step on the device: the per-slice and per-tile descriptors the kernels
// read, how attention is blocked and split, and the byte layout of the step's metadata buffer.
// Pure host logic, so it is unit-tested without a GPU.
#ifndef LAYERPIPE_ENGINE_CUDA_STEP_PLAN_H_
#define LAYERPIPE_ENGINE_CUDA_STEP_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace layerpipe::cuda {

// Query vectors (row, head) one attention block handles: 4 warps of 4 queries each.
constexpr int kQueriesPerBlock = 16;
constexpr int kAttentionThreads = 128;
// Keys staged in shared memory per iteration (one per lane when scores are spread over a warp).
constexpr int kKeysPerTile = 32;
constexpr int kMaxSplits = 32;
// Largest head dimension the attention kernel keeps in registers (16 values per lane).
constexpr int kMaxHeadDim = 512;
// Head dims the kernels take: whole 16-byte vectors of bf16 (the K/V tile loads and stores).
constexpr int kHeadDimMultiple = 8;

struct SliceMeta {
  int64_t pos0;  // position of the slice's first new token
  int32_t n;     // new tokens
  int32_t row0;  // first row of the slice in the step's [rows] activations
};

struct TileMeta {
  int32_t slice;
  int32_t row_begin;  // inside the slice
};

// How the query heads of one layer type are grouped into blocks: a block serves `heads_per_chunk`
// heads of one GQA group for `rows_per_tile` consecutive rows, so keys staged once serve them all.
struct AttentionBlocking {
  int group;            // query heads per KV head
  int heads_per_chunk;  // <= kQueriesPerBlock
  int head_chunks;      // chunks per group
  int rows_per_tile;
};

AttentionBlocking BlockingFor(int heads, int kv_heads);

// Tiles of `rows_per_tile` rows covering every row of every slice exactly once, in slice order, except
// the slices whose `skip` entry is true (empty `skip`: none).
std::vector<TileMeta> MakeTiles(const std::vector<SliceMeta>& slices, int rows_per_tile,
                                const std::vector<bool>& skip = {});

// ---- Prefill attention on tensor cores (kernels_attention_gemm.cu): a slice with at least this many
// rows is attended with cuBLASLt GEMMs (scores, then probabilities times values) instead of the
// attention kernel, in the bf16 mode.
constexpr int64_t kGemmAttentionMinRows = 64;
// GEMM shapes are padded to these multiples so that few distinct shapes (cuBLASLt plans) arise.
constexpr int64_t kGemmAttentionRowAlign = 16;
constexpr int64_t kGemmAttentionKeyAlign = 64;

// One block of a slice's queries and the keys they see: rows [row_begin, row_begin + rows) of the
// slice (padded to rows_pad) against positions [key_begin, key_begin + keys) (padded to keys_pad).
struct GemmQueryBlock {
  int64_t row_begin, rows, rows_pad;
  int64_t key_begin, keys, keys_pad;
};

// Cuts a slice into query blocks whose scratch (scores and probabilities: 8 bytes per query head, row
// and key) stays within `budget_bytes`, never below kGemmAttentionRowAlign rows per block. `last_key`:
// the last key each of the slice's rows sees ([s.n], non-decreasing; kv_index.h LastVisibleKey), or
// null when every row's is its own position.
std::vector<GemmQueryBlock> PlanGemmQueryBlocks(const SliceMeta& s, int64_t window, int heads,
                                                int64_t budget_bytes, const int64_t* last_key = nullptr);

// Key-range splits for a launch of `blocks` blocks (before splitting) whose key ranges are at most
// `max_keys` long: enough to give every SM two blocks, never pieces shorter than a few tiles.
// Depends only on the launch shape and the layer type, never on the context length, so a captured
// decode graph stays valid as sequences grow.
int ChooseSplits(int64_t blocks, int64_t max_keys, int sm_count);

// Byte offsets of the sections of a step's metadata buffer. Every section except the page-pointer
// table (last) has a size that depends only on the step's shape, so a decode graph captured for one
// batch size finds its sections at the same addresses in every later step of that size.
struct StepLayout {
  size_t slices = 0;         // SliceMeta[num_slices]
  size_t row_slice = 0;      // int32[rows]
  size_t tiles_sliding = 0;  // TileMeta[]
  size_t tiles_full = 0;     // TileMeta[]
  size_t kv_offset = 0;      // int32[local_layers][num_slices]: index of the layer's first block pointer
  size_t cs_sliding = 0;     // float[rows][2 * pairs_sliding]
  size_t cs_full = 0;        // float[rows][2 * pairs_full]
  size_t last_key = 0;       // int64[rows] when the step has image blocks, else empty (kv_index.h)
  size_t ptrs = 0;           // uint64[num_ptrs]: ring base, or page bases in page order
  size_t total = 0;
};

StepLayout LayoutFor(int num_slices, int64_t rows, size_t tiles_sliding, size_t tiles_full, int local_layers,
                     int pairs_sliding, int pairs_full, size_t num_ptrs, bool last_keys = false);

}  // namespace layerpipe::cuda

#endif  // LAYERPIPE_ENGINE_CUDA_STEP_PLAN_H_
