// Causal (optionally sliding-window, optionally with bidirectional image blocks) attention of a chunk of new tokens against a sequence's KV cache,
// with the model's score scale of 1.0.
#ifndef LAYERPIPE_ENGINE_CPU_ATTENTION_H_
#define LAYERPIPE_ENGINE_CPU_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/model/soft_tokens.h"
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
  // Image blocks inside the chunk (absolute positions): a query in one also sees the later keys of its
  // block, all of which are in the chunk. Empty on full layers, which stay causal.
  absl::Span<const PositionRange> image_blocks = {};
};

// Rows [row_begin, row_end) of the query heads [head_begin, head_end), which must all read kv_head
// (one GQA group or part of one): each cached key and value row is read once for all of them. Keys are
// visited in position order whatever the chunking, so results are independent of chunk size and of how
// heads are grouped into calls.
void AttendHeads(const AttentionChunk& c, int head_begin, int head_end, int kv_head, int head_dim,
                 int64_t row_begin, int64_t row_end, std::vector<float>& scores);

// Copies the chunk's keys and values into the cache (only those a ring will still hold).
void StoreChunk(const AttentionChunk& c);

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CPU_ATTENTION_H_
