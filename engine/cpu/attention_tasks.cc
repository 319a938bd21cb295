#include "engine/cpu/attention_tasks.h"

#include <algorithm>
#include <atomic>

namespace layerpipe {

void AttentionRunner::Plan(absl::Span<const AttentionChunk> chunks, int heads, int kv_heads, int head_dim,
                           int threads) {
  tasks_.clear();
  splits_.clear();
  const int group = heads / kv_heads;
  auto whole_tasks_of = [&](int64_t rows) {
    int64_t tasks = 0;
    for (const AttentionChunk& c : chunks) tasks += kv_heads * ((c.n + rows - 1) / rows);
    return tasks;
  };
  // Long chunks in big row blocks (their groups share packed keys, attention.cc), halved while that
  // leaves too few tasks to balance the threads.
  int64_t rows_per_task = kMaxRowsPerTask;
  while (rows_per_task > kMinRowsPerTask && whole_tasks_of(rows_per_task) < kTasksPerThread * threads) {
    rows_per_task /= 2;
  }
  const int64_t whole_tasks = whole_tasks_of(rows_per_task);
  if (whole_tasks == 0) return;  // only empty chunks
  const bool idle = whole_tasks < threads;
  const int parts = static_cast<int>(std::clamp<int64_t>((threads + whole_tasks - 1) / whole_tasks, 1, group));
  for (int ci = 0; ci < static_cast<int>(chunks.size()); ++ci) {
    const AttentionChunk& c = chunks[ci];
    if (c.n <= 0) continue;
    const int64_t segments = SegmentCount(c, 0, c.n);
    const bool by_segments = idle && segments > 1 && c.n * group <= kMaxSegmentVectors;
    for (int kv = 0; kv < kv_heads; ++kv) {
      const int h0 = kv * group;
      if (by_segments) {
        const int split = static_cast<int>(splits_.size());
        splits_.push_back({ci, h0, h0 + group, c.n});
        if (partials_.size() < splits_.size()) partials_.resize(splits_.size());
        partials_[split].Resize(c.n * group, segments, head_dim);
        for (int64_t seg = 0; seg < segments; ++seg) tasks_.push_back({ci, h0, h0 + group, 0, c.n, split, seg, seg + 1});
        segment_tasks_run_ += segments;
        continue;
      }
      for (int part = 0; part < parts; ++part) {
        const int hb = h0 + group * part / parts, he = h0 + group * (part + 1) / parts;
        // Last rows first: in a causal chunk they see the most keys, and the short tasks then fill in.
        for (int64_t rb = (c.n - 1) / rows_per_task * rows_per_task; rb >= 0; rb -= rows_per_task) {
          tasks_.push_back({ci, hb, he, rb, std::min(c.n, rb + rows_per_task), -1, 0, 0});
        }
      }
    }
  }
}

bool AttentionRunner::Bf16Pairs(Precision precision, int heads, int kv_heads) {
  return precision == Precision::kBf16 && AttentionBf16DotDefault() && heads / kv_heads >= kMinBf16PairsGroup;
}

void AttentionRunner::Run(absl::Span<const AttentionChunk> chunks, int heads, int kv_heads, int head_dim,
                          ThreadPool& pool) {
  if (chunks.empty()) return;
  Plan(chunks, heads, kv_heads, head_dim, pool.size());
  const int group = heads / kv_heads;
  const bool pairs = Bf16Pairs(chunks[0].precision, heads, kv_heads);
  std::atomic<int64_t> next_task{0};
  pool.ParallelFor(pool.size(), [&](int64_t, int64_t) {
    thread_local AttentionScratch scratch;
    scratch.bf16_dot = pairs;
    for (int64_t t; (t = next_task.fetch_add(1, std::memory_order_relaxed)) < static_cast<int64_t>(tasks_.size());) {
      const Task& task = tasks_[t];
      const AttentionChunk& c = chunks[task.chunk];
      if (task.split < 0) {
        AttendHeads(c, task.head_begin, task.head_end, task.head_begin / group, head_dim, task.row_begin,
                    task.row_end, scratch);
      } else {
        AttendSegments(c, task.head_begin, task.head_end, task.head_begin / group, head_dim, task.row_begin,
                       task.row_end, task.seg_begin, task.seg_end, partials_[task.split], scratch);
      }
    }
  });
  for (size_t i = 0; i < splits_.size(); ++i) {
    const Split& s = splits_[i];
    CombineSegments(chunks[s.chunk], s.head_begin, s.head_end, head_dim, 0, s.rows, partials_[i]);
  }
  for (const AttentionChunk& c : chunks) StoreChunk(c);
}

}  // namespace layerpipe
