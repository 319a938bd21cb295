#include "engine/cpu/attention_tasks.h"

#include <algorithm>
#include <atomic>
#include <climits>

namespace layerpipe {

void AttentionRunner::FormCohorts(absl::Span<const AttentionChunk> chunks, int group, int kv_heads, int head_dim) {
  cohorts_.clear();
  members_.assign(chunks.size(), Member{});
  int64_t bytes = 0;  // of all the cohorts' partials
  auto eligible = [&](const AttentionChunk& c) {
    return c.n > 0 && c.window == 0 && !c.cache->ring() && c.n * group <= kMaxSegmentVectors;
  };
  for (size_t i = 0; i < chunks.size(); ++i) {
    const AttentionChunk& lead = chunks[i];
    if (members_[i].cohort >= 0 || !eligible(lead)) continue;
    Cohort cohort{{&lead}, INT64_MAX, lead.n * group};
    std::vector<size_t> joined = {i};
    for (size_t j = i + 1; j < chunks.size(); ++j) {
      const AttentionChunk& c = chunks[j];
      if (members_[j].cohort >= 0 || !eligible(c) || cohort.vectors + c.n * group > kMaxSharedVectors) continue;
      // Keys before both chunks' rows, so that every row of both sees them all.
      const int64_t shared = std::min({lead.cache->SharedPositions(*c.cache), lead.pos0, c.pos0}) / kKeySegment;
      if (shared < kMinSharedSegments) continue;
      cohort.chunks.push_back(&c);
      cohort.segments = std::min(cohort.segments, shared);
      joined.push_back(j);
      cohort.vectors += c.n * group;
    }
    if (joined.size() < 2) continue;
    bytes += cohort.vectors * kv_heads * cohort.segments * head_dim * static_cast<int64_t>(sizeof(float));
    if (bytes > max_shared_bytes_) break;
    int64_t offset = 0;
    for (size_t m : joined) {
      members_[m] = {static_cast<int>(cohorts_.size()), offset};
      offset += chunks[m].n * group;
    }
    cohorts_.push_back(std::move(cohort));
  }
}

void AttentionRunner::PlanShares(int group, int kv_heads, int head_dim) {
  if (share_partials_.size() < cohorts_.size() * kv_heads) share_partials_.resize(cohorts_.size() * kv_heads);
  for (size_t co = 0; co < cohorts_.size(); ++co) {
    const Cohort& cohort = cohorts_[co];
    for (int kv = 0; kv < kv_heads; ++kv) {
      const int share = static_cast<int>(co) * kv_heads + kv;
      share_partials_[share].Resize(cohort.vectors, cohort.segments, head_dim);
      for (int64_t seg = 0; seg < cohort.segments; ++seg) {
        tasks_.push_back({-1, kv * group, (kv + 1) * group, 0, 0, -1, seg, seg + 1, share});
      }
      segment_tasks_run_ += cohort.segments;
      shared_tasks_run_ += cohort.segments;
    }
  }
}

void AttentionRunner::Plan(absl::Span<const AttentionChunk> chunks, int heads, int kv_heads, int head_dim,
                           int threads) {
  tasks_.clear();
  splits_.clear();
  const int group = heads / kv_heads;
  FormCohorts(chunks, group, kv_heads, head_dim);
  PlanShares(group, kv_heads, head_dim);
  const int64_t shared_tasks = static_cast<int64_t>(tasks_.size());
  auto whole_tasks_of = [&](int64_t rows) {
    int64_t tasks = 0;
    for (size_t ci = 0; ci < chunks.size(); ++ci) {
      if (members_[ci].cohort < 0) tasks += kv_heads * ((chunks[ci].n + rows - 1) / rows);
    }
    return tasks;
  };
  // Long chunks in big row blocks (their groups share packed keys, attention.cc), halved while that
  // leaves too few tasks to balance the threads.
  int64_t rows_per_task = kMaxRowsPerTask;
  while (rows_per_task > kMinRowsPerTask && whole_tasks_of(rows_per_task) < kTasksPerThread * threads) {
    rows_per_task /= 2;
  }
  const int64_t whole_tasks = whole_tasks_of(rows_per_task);
  const bool idle = whole_tasks + shared_tasks < threads;
  const int parts =
      static_cast<int>(std::clamp<int64_t>((threads + whole_tasks - 1) / std::max<int64_t>(whole_tasks, 1), 1, group));
  for (int ci = 0; ci < static_cast<int>(chunks.size()); ++ci) {
    const AttentionChunk& c = chunks[ci];
    if (c.n <= 0) continue;
    const int64_t segments = SegmentCount(c, 0, c.n);
    const int co = members_[ci].cohort;
    // A cohort's chunk attends the segments after the shared ones by itself.
    const int64_t first = co >= 0 ? cohorts_[co].segments : 0;
    const bool by_segments = co >= 0 || (idle && segments > 1 && c.n * group <= kMaxSegmentVectors);
    for (int kv = 0; kv < kv_heads; ++kv) {
      const int h0 = kv * group;
      if (by_segments) {
        const int split = static_cast<int>(splits_.size());
        const int share = co >= 0 ? co * kv_heads + kv : -1;
        splits_.push_back({ci, h0, h0 + group, c.n, share, members_[ci].offset});
        if (partials_.size() < splits_.size()) partials_.resize(splits_.size());
        partials_[split].Resize(c.n * group, segments - first, head_dim);
        partials_[split].first = first;
        for (int64_t seg = first; seg < segments; ++seg) {
          tasks_.push_back({ci, h0, h0 + group, 0, c.n, split, seg, seg + 1});
        }
        segment_tasks_run_ += segments - first;
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
      if (task.shared >= 0) {
        AttendSharedSegments(cohorts_[task.shared / kv_heads].chunks, task.head_begin, task.head_end,
                             task.shared % kv_heads, head_dim, task.seg_begin, task.seg_end,
                             share_partials_[task.shared], scratch);
        continue;
      }
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
  // Each split writes its own rows' outputs: the threads may take them in any order.
  pool.ParallelFor(static_cast<int64_t>(splits_.size()), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const Split& s = splits_[i];
      CombineSegments(chunks[s.chunk], s.head_begin, s.head_end, head_dim, 0, s.rows, partials_[i],
                      s.shared >= 0 ? &share_partials_[s.shared] : nullptr, s.shared_offset);
    }
  });
  for (const AttentionChunk& c : chunks) StoreChunk(c);
}

}  // namespace layerpipe
