// A fixed-size pool of worker threads for data-parallel loops.
//
// ParallelFor splits [0, n) into contiguous chunks whose boundaries depend only on n and the pool
// size, never on timing, so any caller whose chunks write disjoint outputs gets reproducible results.
// The calling thread runs chunk 0 itself. Workers spin briefly between calls (a decode step issues many
// short loops back to back) and then sleep on a futex-backed atomic wait, so an idle pool costs no CPU.
#ifndef LAYERPIPE_ENGINE_CPU_THREAD_POOL_H_
#define LAYERPIPE_ENGINE_CPU_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace layerpipe {

class ThreadPool {
 public:
  // num_threads counts the calling thread; 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Number of threads that take part in a ParallelFor (workers + the caller).
  int size() const { return size_; }

  // Calls fn(begin, end) over a partition of [0, n) into c = min(n, size()) contiguous chunks; chunk i
  // is [n*i/c, n*(i+1)/c) and runs on thread i (0 = the caller). Returns once every chunk is done.
  // A call made from inside fn, or while another thread is using the pool, runs the same chunks in
  // order on the calling thread. An exception from fn on a worker ends the process; one from the
  // caller's chunk propagates once the workers are done.
  void ParallelFor(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  void WorkerLoop(int index);
  void RunChunk(int index) const;
  void RunInline(int64_t n, int chunks, const std::function<void(int64_t, int64_t)>& fn) const;

  const int size_;
  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // one ParallelFor at a time uses the workers

  // The current job; written by the caller before generation_ is bumped, read by workers after.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int chunks_ = 0;
  bool stop_ = false;

  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int> pending_{0};   // workers that have not yet finished the current job
  alignas(64) std::atomic<int> sleepers_{0};  // workers blocked in generation_.wait()
};

// Threads for a process-wide pool: $LAYERPIPE_THREADS if set to a positive integer, otherwise
// std::thread::hardware_concurrency() (at least 1).
int DefaultThreadCount();

// The process-wide pool, created on first use with DefaultThreadCount() threads.
ThreadPool& DefaultThreadPool();

}  // namespace layerpipe

#endif  // LAYERPIPE_ENGINE_CPU_THREAD_POOL_H_
