#include "engine/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace layerpipe {
namespace {

using Chunks = std::set<std::pair<int64_t, int64_t>>;

Chunks RecordChunks(ThreadPool& pool, int64_t n) {
  std::mutex mu;
  Chunks chunks;
  pool.ParallelFor(n, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    chunks.emplace(b, e);
  });
  return chunks;
}

TEST(ThreadPoolTest, SizeCountsTheCaller) {
  EXPECT_EQ(ThreadPool(1).size(), 1);
  EXPECT_EQ(ThreadPool(3).size(), 3);
  const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  EXPECT_EQ(ThreadPool(0).size(), hw);
}

TEST(ThreadPoolTest, EveryIndexRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 3, 7, 8, 9, 100, 1001}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, [&](int64_t b, int64_t e) {
        ASSERT_LE(0, b);
        ASSERT_LT(b, e);
        ASSERT_LE(e, n);
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "threads=" << threads << " n=" << n;
    }
  }
}

TEST(ThreadPoolTest, PartitionDependsOnlyOnNAndSize) {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 3, 4, 10, 1000}) {
    const Chunks first = RecordChunks(pool, n);
    const int64_t c = std::min<int64_t>(n, 3);
    Chunks expected;
    for (int64_t i = 0; i < c; ++i) expected.emplace(n * i / c, n * (i + 1) / c);
    EXPECT_EQ(first, expected) << "n=" << n;
    for (int rep = 0; rep < 50; ++rep) ASSERT_EQ(RecordChunks(pool, n), first);
  }
}

TEST(ThreadPoolTest, CallerRunsTheFirstChunk) {
  ThreadPool pool(2);
  std::thread::id first_chunk_thread;
  std::thread::id other_chunk_thread;
  pool.ParallelFor(2, [&](int64_t b, int64_t) {
    (b == 0 ? first_chunk_thread : other_chunk_thread) = std::this_thread::get_id();
  });
  EXPECT_EQ(first_chunk_thread, std::this_thread::get_id());
  EXPECT_NE(other_chunk_thread, std::this_thread::get_id());
}

TEST(ThreadPoolTest, NestedCallsRunInlineWithTheSamePartition) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  std::mutex mu;
  std::vector<Chunks> inner_chunks;
  pool.ParallelFor(4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      Chunks inner;
      pool.ParallelFor(10, [&](int64_t ib, int64_t ie) {
        inner.emplace(ib, ie);  // inline: runs on this thread, no lock needed
        for (int64_t j = ib; j < ie; ++j) sum += i * 10 + j;
      });
      std::lock_guard<std::mutex> lock(mu);
      inner_chunks.push_back(inner);
    }
  });
  EXPECT_EQ(sum.load(), 39 * 40 / 2);
  ASSERT_EQ(inner_chunks.size(), 4u);
  for (const Chunks& c : inner_chunks) EXPECT_EQ(c, (Chunks{{0, 5}, {5, 10}}));
}

TEST(ThreadPoolTest, ConcurrentCallersAllComplete) {
  ThreadPool pool(2);
  constexpr int kCallers = 4, kCalls = 2000;
  std::vector<int64_t> totals(kCallers, 0);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int call = 0; call < kCalls; ++call) {
        std::atomic<int64_t> s{0};
        pool.ParallelFor(64, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) s += i;
        });
        totals[c] += s.load();
      }
    });
  }
  for (std::thread& t : callers) t.join();
  for (int64_t t : totals) EXPECT_EQ(t, int64_t{kCalls} * 63 * 64 / 2);
}

TEST(ThreadPoolTest, ManyBackToBackCalls) {
  ThreadPool pool(2);
  std::vector<int64_t> slots(2 * 16, 0);  // one cache line apart per chunk
  for (int call = 0; call < 100000; ++call) {
    pool.ParallelFor(2, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) slots[i * 16] += 1;
    });
  }
  EXPECT_EQ(slots[0], 100000);
  EXPECT_EQ(slots[16], 100000);
}

TEST(ThreadPoolTest, WakesWorkersThatFellAsleep) {
  ThreadPool pool(2);
  for (int round = 0; round < 5; ++round) {
    // Longer than the spin budget, so workers block in the kernel before the next call.
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    std::atomic<int> hits{0};
    std::thread::id worker_thread;
    pool.ParallelFor(2, [&](int64_t b, int64_t) {
      hits++;
      if (b == 1) worker_thread = std::this_thread::get_id();
    });
    EXPECT_EQ(hits.load(), 2);
    EXPECT_NE(worker_thread, std::this_thread::get_id());
  }
}

TEST(ThreadPoolTest, ExceptionFromCallersChunkWaitsForWorkers) {
  ThreadPool pool(2);
  std::atomic<bool> worker_done{false};
  EXPECT_THROW(pool.ParallelFor(2,
                                [&](int64_t b, int64_t) {
                                  if (b == 0) throw std::runtime_error("chunk 0");
                                  std::this_thread::sleep_for(std::chrono::milliseconds(20));
                                  worker_done = true;
                                }),
               std::runtime_error);
  EXPECT_TRUE(worker_done.load());
  // The pool is still usable.
  std::atomic<int> hits{0};
  pool.ParallelFor(2, [&](int64_t, int64_t) { hits++; });
  EXPECT_EQ(hits.load(), 2);
}

TEST(ThreadPoolTest, DefaultThreadCountReadsEnvironment) {
  const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  setenv("LAYERPIPE_THREADS", "3", 1);
  EXPECT_EQ(DefaultThreadCount(), 3);
  for (const char* bad : {"0", "-2", "abc", "4x", ""}) {
    setenv("LAYERPIPE_THREADS", bad, 1);
    EXPECT_EQ(DefaultThreadCount(), hw) << "'" << bad << "'";
  }
  unsetenv("LAYERPIPE_THREADS");
  EXPECT_EQ(DefaultThreadCount(), hw);
  EXPECT_EQ(DefaultThreadPool().size(), hw);
  EXPECT_EQ(&DefaultThreadPool(), &DefaultThreadPool());
}

}  // namespace
}  // namespace layerpipe
