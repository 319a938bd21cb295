// Causal (optionally sliding-window, optionally with bidirectional image blocks) attention of a chunk of new tokens against a sequence's KV cache,
// with the model's score scale of 1.0.
#ifndef LAYERPIPE_ENGINE_CPU_ATTENTION_H_
#define LAYERPIPE_ENGINE_CPU_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/model/soft_tokens.h"
#include "engine/cpu/aligned_vector.h"
#include "engine/cpu/kv_cache.h"
#include "engine/model/precision.h"

namespace layerpipe {

// The chunk: n new tokens at positions pos0.. of one sequence. Keys before pos0 are read in place from
// `cache`; the chunk's own keys from k_new/v_new (already rounded to the cache's precision, so a key
// gives the same scores whether it is read from the chunk or, later, from the cache).
struct AttentionChunk {
  LayerKvCache* cache;
  Precision precision;
  int64_t pos0;
  int64_t n;
  int64_t window;  // 0: full attention
  const float* q;  // [n][q_stride]
  int64_t q_stride;
  const float* k_new;  // [n][kv_stride]
  const float* v_new;
  int64_t kv_stride;
  float* out;  // [n][out_stride]
  int64_t out_stride;
  // Image blocks that end inside the chunk (absolute positions; one may begin before pos0 when the
  // rows before the chunk only stored their keys): a query in one also sees the later keys of its
  // block, all of which are in the chunk. Empty on full layers, which stay causal.
  absl::Span<const PositionRange> image_blocks = {};
};

// Keys are attended in segments of this many absolute positions ([0, S), [S, 2S), ...). A query's
// result combines its segments' partial softmax results in segment order, whether one call takes all
// of them (AttendHeads) or threads take them apart (AttendSegments, then CombineSegments:
// flash-decoding), so splitting a long context's keys across threads changes no bit.
constexpr int64_t kKeySegment = 512;

// Per query vector and segment: the segment's unnormalized output Σ exp(s - m)·v, its score maximum m
// (-inf: the vector sees no key there) and Σ exp(s - m). Vectors are (row, head) in row-major order.
struct SegmentPartials {
  int64_t vectors = 0, segments = 0;
  int64_t first = 0;  // the index (among the SegmentCount ones) of the first segment held
  int head_dim = 0;
  AlignedVector<float> out;  // [vector][segment][head_dim]
  std::vector<float> max;   // [vector][segment]
  std::vector<double> sum;  // [vector][segment]
  void Resize(int64_t vector_count, int64_t segment_count, int dim);
};

// Whether attention's weighted sums run on 512-bit registers by default: where the CPU has AVX-512F,
// unless $LAYERPIPE_MATMUL_ISA=avx2 keeps every kernel at 256 bits. The bits are the same either way.
bool AttentionAvx512Default();

// Whether attention with a bf16 cache may multiply bf16 pairs on vdpbf16ps here: where MatmulBf16 runs
// on it (MatmulIsa::kAvx512Bf16), so $LAYERPIPE_MATMUL_ISA=avx2 or avx512f keeps the AVX2 bits.
bool AttentionBf16DotDefault();

// Working memory of AttendHeads, one per thread, reused from call to call (it only grows).
struct AttentionScratch {
  bool avx512 = AttentionAvx512Default();  // tests turn it off to compare the two
  // A bf16 cache's products on vdpbf16ps (attention_dot.h; other bits than the fp32 products): only
  // where AttentionBf16DotDefault(); the caller chooses per layer (AttentionRunner::Bf16Pairs).
  bool bf16_dot = false;
  SegmentPartials partials;
  std::vector<float> running_max;   // per query vector of a group, over the segments folded so far
  std::vector<double> running_sum;
  std::vector<float> scores;  // [query vectors][keys]
  std::vector<uint16_t> q16;  // the dot path's queries in bf16
  AlignedVector<float> q_pairs;  // a decode-shaped group's queries in pairs (attention_tiles.h)
  std::vector<const char*> prefetch_rows;  // cache rows that group's kernels prefetch
  std::vector<const float*> f32_rows;
  std::vector<const uint16_t*> bf16_rows;
  std::vector<const float*> q;
  std::vector<float*> out;
  std::vector<float*> p;
};

// Rows [row_begin, row_end) of the query heads [head_begin, head_end), which must all read kv_head
// (one GQA group or part of one): each key and value block is read once for a group of them. Every
// score and output value is computed in one fixed order (keys in position order) whatever the
// chunking, the rows or heads given to a call, or the thread, so results depend only on the query.
void AttendHeads(const AttentionChunk& c, int head_begin, int head_end, int kv_head, int head_dim,
                 int64_t row_begin, int64_t row_end, AttentionScratch& scratch);

// Query vectors one AttendSegments call may take: rows × heads of one group. Segments split among the
// threads let each pack its keys once for all the vectors, where a split by heads has every thread pack
// every key for its share: 4 rows of the 12B's global layer (64 vectors) at 8192 and 32768 context took
// 1.26x less time so (2-core Zen 5 VM, alternating calls); 8 rows gained 2-14 %, 16 rows none. The
// partials then hold vectors × segments × head_dim floats: 64 × 64 × 512 (8 MiB) at 32768 context.
constexpr int kMaxSegmentVectors = 64;

// The key segments that the rows [row_begin, row_end) of the chunk see, together.
int64_t SegmentCount(const AttentionChunk& c, int64_t row_begin, int64_t row_end);

// Segments [seg_begin, seg_end) (of the SegmentCount ones) for the rows [row_begin, row_end) and heads
// [head_begin, head_end) of kv_head, at most kMaxSegmentVectors vectors: fills those segments of
// `partials` (already Resize'd to the vectors and SegmentCount). Calls for disjoint segment ranges may
// run on different threads at once.
void AttendSegments(const AttentionChunk& c, int head_begin, int head_end, int kv_head, int head_dim,
                    int64_t row_begin, int64_t row_end, int64_t seg_begin, int64_t seg_end,
                    SegmentPartials& partials, AttentionScratch& scratch);

// Segments [seg_begin, seg_end) for the rows of several chunks at once (heads [head_begin, head_end) of
// kv_head): keys that every one of those rows sees and that are the same memory in all their caches (a
// prefix their sequences started from: LayerKvCache::SharedPositions), so that they are read once for
// all. Vectors are the chunks' (row, head) in chunk order, then row-major; the partials hold segments
// from 0. Each vector's partials are those AttendSegments gives it.
void AttendSharedSegments(absl::Span<const AttentionChunk* const> chunks, int head_begin, int head_end, int kv_head,
                          int head_dim, int64_t seg_begin, int64_t seg_end, SegmentPartials& partials,
                          AttentionScratch& scratch);

// Writes the outputs of those rows and heads from all their segments' partials: where `shared` is given,
// first its segments (vector shared_offset + v for the chunk's vector v), then those of `partials`.
void CombineSegments(const AttentionChunk& c, int head_begin, int head_end, int head_dim, int64_t row_begin,
                     int64_t row_end, const SegmentPartials& partials, const SegmentPartials* shared = nullptr,
                     int64_t shared_offset = 0);

// Copies the chunk's keys and values into the cache (only those a ring will still hold).
void StoreChunk(const AttentionChunk& c);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CPU_ATTENTION_H_
