// Spreads one layer's attention over the thread pool. Work goes out as tasks that threads take one by
// one (a causal prefill's last rows see many more keys than its first): a GQA group and a block of
// query rows each; when that leaves threads idle, groups are split by heads, or, for the few rows of
// decode over a long context, by key segments (flash-decoding), whose partial results are combined
// afterwards. Decode steps of sequences that started from one cached prefix (many questions about one
// long document) read that prefix's keys once for all of them: its segments are attended for their
// vectors together, each sequence's own keys after it apart. No split changes a bit of the results
// (attention.h).
#ifndef LAYERPIPE_ENGINE_CPU_ATTENTION_TASKS_H_
#define LAYERPIPE_ENGINE_CPU_ATTENTION_TASKS_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/thread_pool.h"

namespace layerpipe {

class AttentionRunner {
 public:
  // max_shared_bytes: the most the shared prefixes' partial results may take a call (see below).
  explicit AttentionRunner(int64_t max_shared_bytes = kMaxSharedBytes) : max_shared_bytes_(max_shared_bytes) {}

  // Attends all heads and rows of every chunk (heads query heads over kv_heads KV heads of head_dim),
  // then stores the chunks' keys and values in their caches.
  void Run(absl::Span<const AttentionChunk> chunks, int heads, int kv_heads, int head_dim, ThreadPool& pool);

  // Whether a layer of this shape multiplies a bf16 cache's values as bf16 pairs here (attention_dot.h):
  // where the CPU runs them, for GQA groups of kMinBf16PairsGroup query heads and more. Packing a
  // block's keys (a transpose) costs about what scoring it costs for five vectors, so the 12B's global
  // layers (16 heads a KV head) gain 1.5-1.7x at prefill and decode; its sliding layers (2) gain 1.4x at
  // prefill (33 -> 23 ms a 512-row chunk at 4096) and lose at decode (0.15 -> 0.30 ms a step), which on
  // 6 12B-shaped layers moved attention from 8.3 to 6 % of a 4096-token prefill and from 3.0 to 3.4 % of
  // a decode step (2-core Zen 5 VM). A single query head a KV head has too few vectors to pay. A layer's
  // choice depends on its shape only, so no chunking or split changes a bit.
  static bool Bf16Pairs(Precision precision, int heads, int kv_heads);
  static constexpr int kMinBf16PairsGroup = 2;

  // Tasks run so far that took key segments (flash-decoding), and of those the ones that took a
  // shared prefix's segments for several sequences at once: for tests and benchmarks.
  int64_t segment_tasks_run() const { return segment_tasks_run_; }
  int64_t shared_tasks_run() const { return shared_tasks_run_; }

  // Shared prefixes: chunks of at most kMaxSegmentVectors vectors a KV head (decode steps) join a group
  // of at most kMaxSharedVectors vectors over the whole segments their caches share, at least
  // kMinSharedSegments of them. The groups' partial results (vectors x segments x head_dim floats: 16 MiB
  // for 128 vectors of a 512-wide head at 32768 context) stay within kMaxSharedBytes a call (by
  // default); chunks past it attend their keys alone. 8 sequences of the 12B's global layer at 32768
  // context in one group of 128 vectors rather than two of 64: 1.09-1.11x (16 in groups of 256: 1.15x,
  // of 128: 1.12x; 2-core Zen 5 VM, alternating calls).
  static constexpr int kMaxSharedVectors = 128;
  static constexpr int64_t kMinSharedSegments = 2;
  static constexpr int64_t kMaxSharedBytes = int64_t{64} << 20;

  // Query rows per task: as many as leave kTasksPerThread tasks a thread, within these bounds.
  static constexpr int64_t kMaxRowsPerTask = 64;
  static constexpr int64_t kMinRowsPerTask = 16;
  static constexpr int64_t kTasksPerThread = 4;

 private:
  struct Task {
    int chunk, head_begin, head_end;
    int64_t row_begin, row_end;
    // -1: the whole key range; else splits_[split] (or, with `shared`, share `shared`), segments
    // [seg_begin, seg_end)
    int split;
    int64_t seg_begin, seg_end;
    int shared = -1;
  };
  struct Split {
    int chunk, head_begin, head_end;
    int64_t rows;
    int shared = -1;  // share `shared` holds the segments before this split's, at shared_offset
    int64_t shared_offset = 0;
  };
  // Chunks whose caches hold their first `segments` key segments in the same memory, with `vectors`
  // query vectors a KV head in all. Share cohort * kv_heads + kv attends them for KV head kv.
  struct Cohort {
    std::vector<const AttentionChunk*> chunks;
    int64_t segments;
    int64_t vectors;
  };
  // A chunk's cohort (-1: none) and its first vector's place among the cohort's vectors.
  struct Member {
    int cohort = -1;
    int64_t offset = 0;
  };
  void Plan(absl::Span<const AttentionChunk> chunks, int heads, int kv_heads, int head_dim, int threads);
  // Fills cohorts_, and members_[i] for the chunks that join one.
  void FormCohorts(absl::Span<const AttentionChunk> chunks, int group, int kv_heads, int head_dim);
  // A share and its segment tasks for each cohort and KV head.
  void PlanShares(int group, int kv_heads, int head_dim);

  std::vector<Task> tasks_;
  std::vector<Split> splits_;
  std::vector<SegmentPartials> partials_;  // one per split, reused across calls
  std::vector<Cohort> cohorts_;
  std::vector<Member> members_;  // one per chunk of the call, reused across calls
  std::vector<SegmentPartials> share_partials_;  // one per share, reused across calls
  int64_t segment_tasks_run_ = 0;
  int64_t shared_tasks_run_ = 0;
  int64_t max_shared_bytes_;
};

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CPU_ATTENTION_TASKS_H_
