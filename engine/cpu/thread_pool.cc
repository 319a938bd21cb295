#include "engine/cpu/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

namespace layerpipe {
namespace {

// How long an idle thread polls before blocking. Decode issues loops a few µs to a few hundred µs
// apart; polling for that long keeps a call at a few µs, while a futex wake-up costs tens of µs.
constexpr std::chrono::microseconds kSpinBudget(200);

// > 0 while this thread runs a chunk or owns a pool's workers; a ParallelFor from inside one runs
// inline instead of waiting for workers that may be busy with (or blocked behind) the outer loop.
thread_local int tls_pool_depth = 0;

struct DepthGuard {
  DepthGuard() { ++tls_pool_depth; }
  ~DepthGuard() { --tls_pool_depth; }
};

// Polls until pred() holds or the spin budget runs out; returns pred()'s last value. (Yielding
// while polling measured much worse when another process keeps a core busy: CFS then hands the
// core to that process for a whole slice.)
template <typename Pred>
bool SpinUntil(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinBudget;
  for (int i = 1;; ++i) {
    if (pred()) return true;
    _mm_pause();
    if ((i & 63) == 0 && std::chrono::steady_clock::now() > deadline) return pred();
  }
}

int64_t ChunkBegin(int64_t n, int chunks, int i) { return n * i / chunks; }

}  // namespace

ThreadPool::ThreadPool(int num_threads)
    : size_(num_threads > 0 ? num_threads
                            : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))) {
  workers_.reserve(size_ - 1);
  for (int i = 1; i < size_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_ = true;
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunChunk(int index) const {
  const int64_t begin = ChunkBegin(n_, chunks_, index);
  const int64_t end = ChunkBegin(n_, chunks_, index + 1);
  (*fn_)(begin, end);
}

void ThreadPool::RunInline(int64_t n, int chunks,
                           const std::function<void(int64_t, int64_t)>& fn) const {
  DepthGuard depth;
  for (int i = 0; i < chunks; ++i) fn(ChunkBegin(n, chunks, i), ChunkBegin(n, chunks, i + 1));
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int chunks = static_cast<int>(std::min<int64_t>(n, size_));
  if (chunks == 1 || tls_pool_depth > 0) return RunInline(n, chunks, fn);
  std::unique_lock<std::mutex> lock(call_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return RunInline(n, chunks, fn);
  DepthGuard depth;

  fn_ = &fn;
  n_ = n;
  chunks_ = chunks;
  // Every worker acknowledges every job, even without a chunk, so none can still be reading the job
  // fields when the next call overwrites them.
  pending_.store(size_ - 1, std::memory_order_relaxed);
  // seq_cst pairs with the worker's sleepers_ increment: either we see it asleep and wake it, or it
  // sees the new generation before blocking.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();

  // Waits for the workers even if chunk 0 throws: they still reference fn and the job fields.
  struct WaitForWorkers {
    ThreadPool* pool;
    ~WaitForWorkers() {
      std::atomic<int>& pending = pool->pending_;
      if (!SpinUntil([&] { return pending.load(std::memory_order_acquire) == 0; })) {
        for (int p; (p = pending.load(std::memory_order_acquire)) != 0;) {
          pending.wait(p, std::memory_order_acquire);
        }
      }
    }
  } wait_for_workers{this};
  RunChunk(0);
}

void ThreadPool::WorkerLoop(int index) {
  tls_pool_depth = 1;
  uint32_t seen = 0;
  while (true) {
    uint32_t gen = seen;
    auto changed = [&] { return (gen = generation_.load(std::memory_order_acquire)) != seen; };
    if (!SpinUntil(changed)) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      while ((gen = generation_.load(std::memory_order_seq_cst)) == seen) {
        generation_.wait(seen, std::memory_order_seq_cst);
      }
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    seen = gen;
    if (stop_) return;
    if (index < chunks_) RunChunk(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

int DefaultThreadCount() {
  if (const char* env = std::getenv("LAYERPIPE_THREADS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v > 0 && v <= 4096) return static_cast<int>(v);
  }
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

ThreadPool& DefaultThreadPool() {
  // Leaked on purpose: joining workers during static destruction can race with other exit-time code.
  static ThreadPool* pool = new ThreadPool(DefaultThreadCount());
  return *pool;
}

}  // namespace layerpipe
