#pragma once
// A fixed pool of worker threads for the CPU backend. The caller thread takes part, so a pool of
// n threads starts n - 1 workers. Between the operations of one token the workers spin briefly
// instead of sleeping, so dispatching an op costs well under a microsecond; when idle longer
// they sleep on an atomic wait (futex) and cost nothing.

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace shoal::cpu {

class ThreadPool {
 public:
  // fn(begin, end, thread): process items [begin, end) on thread `thread` (0 = the caller).
  using RangeFn = std::function<void(int64_t begin, int64_t end, int thread)>;

  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return m_threads; }

  // Split [0, items) into one contiguous chunk per thread (chunk boundaries are multiples of
  // `grain`) and run fn on all threads; returns when every chunk is done. Not re-entrant.
  void parallelFor(int64_t items, const RangeFn& fn, int64_t grain = 1);

 private:
  void workerLoop(int thread);
  void runChunk(int thread);

  int m_threads;
  std::vector<std::thread> m_workers;
  const RangeFn* m_fn = nullptr;  // the job being run; written before m_generation is bumped
  int64_t m_items = 0;
  int64_t m_grain = 1;
  std::atomic<uint64_t> m_generation{0};  // bumped once per job; workers wait on it
  std::atomic<int> m_pending{0};          // workers still running the current job
  std::atomic<bool> m_stop{false};
};

}  // namespace shoal::cpu
