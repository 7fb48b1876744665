#pragma once
// A fixed pool of worker threads for the CPU backend. The caller thread takes part, so a pool of
// n threads starts n - 1 workers.
//
// A job is cut into a few chunks per thread that threads claim one at a time, so a thread the
// OS has put aside (a busy machine) delays nobody: the others take its share, and the caller
// waits only for chunks actually in progress. Between the ops of one token the workers spin
// briefly (tens of microseconds) instead of sleeping, so dispatching an op costs well under a
// microsecond; idle longer, they sleep on a condition variable and cost nothing.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace shoal::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return m_threads; }

  // Run fn(begin, end, thread) over [0, items) in contiguous chunks whose boundaries are
  // multiples of `grain`, on all threads (thread 0 is the caller; a thread index identifies the
  // thread for per-thread scratch); returns when every item is done. Which thread runs which
  // chunk varies from call to call. Not re-entrant. fn is called by reference, never copied:
  // a job allocates nothing.
  //
  // At most chunksPerThread chunks per thread: threads claim chunks as they finish, so the last
  // one finishes at most a chunk after the others. Few chunks suit short ops, where each claim
  // costs more than the wait; long ones (matmul) ask for more.
  template <typename F>
  void parallelFor(int64_t items, F&& fn, int64_t grain = 1,
                   int chunksPerThread = kDefaultChunksPerThread) {
    using Fn = std::remove_reference_t<F>;
    run(items, grain, chunksPerThread, const_cast<void*>(static_cast<const void*>(&fn)),
        [](void* f, int64_t begin, int64_t end, int thread) {
          (*static_cast<Fn*>(f))(begin, end, thread);
        });
  }

  static constexpr int kDefaultChunksPerThread = 4;

 private:
  using Invoke = void (*)(void* fn, int64_t begin, int64_t end, int thread);

  void run(int64_t items, int64_t grain, int chunksPerThread, void* fn, Invoke invoke);
  void workerLoop(int thread);
  // Claims and runs chunks of job `job` until none is left.
  void work(uint32_t job, int thread);

  int m_threads;
  std::vector<std::thread> m_workers;

  // The current job; written by the caller before m_claim announces it, constant until all its
  // chunks are done.
  void* m_fn = nullptr;
  Invoke m_invoke = nullptr;
  int64_t m_items = 0;
  int64_t m_chunkItems = 0;  // items per chunk (a multiple of the grain)

  // Bits 32..63: the job number; 16..31: the job's chunk count; 0..15: the next unclaimed
  // chunk. Everything a thread checks before claiming comes from this one word, and a claim
  // (compare-exchange) succeeds only for the job the claimant woke for, so a late thread never
  // touches a newer job's state nor claims past the end of its own job.
  std::atomic<uint64_t> m_claim{0};
  std::atomic<uint32_t> m_done{0};        // chunks of the current job finished
  std::atomic<uint32_t> m_generation{0};  // the job number workers wait on
  std::atomic<bool> m_stop{false};

  // Sleeping, after the spin (std::atomic::wait is avoided: libstdc++ 12's can miss a wake-up).
  // A sleeper announces itself in m_sleepers / m_callerSleeps before its last check of the
  // condition; a waker checks them after changing the condition (both sequentially
  // consistent), so one of the two always sees the other.
  std::mutex m_mutex;
  std::condition_variable m_jobPosted;  // workers sleep on it
  std::condition_variable m_jobDone;    // the caller sleeps on it
  std::atomic<int> m_sleepers{0};
  std::atomic<bool> m_callerSleeps{false};
};

}  // namespace shoal::cpu
