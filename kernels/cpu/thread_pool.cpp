#include "kernels/cpu/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SHOAL_CPU_RELAX() _mm_pause()
#else
#define SHOAL_CPU_RELAX() ((void)0)
#endif

namespace shoal::cpu {
namespace {
// About 50-100 µs of spinning: longer than the gap between two ops of a token, much shorter than
// the gap between two user requests.
constexpr int kSpinIterations = 1 << 14;
}  // namespace

ThreadPool::ThreadPool(int threads) : m_threads(std::max(1, threads)) {
  m_workers.reserve(static_cast<size_t>(m_threads - 1));
  for (int t = 1; t < m_threads; ++t) m_workers.emplace_back([this, t] { workerLoop(t); });
}

ThreadPool::~ThreadPool() {
  m_stop.store(true, std::memory_order_release);
  m_generation.fetch_add(1, std::memory_order_acq_rel);
  m_generation.notify_all();
  for (auto& w : m_workers) w.join();
}

void ThreadPool::runChunk(int thread) {
  const int64_t units = (m_items + m_grain - 1) / m_grain;
  const int64_t per = units / m_threads;
  const int64_t extra = units % m_threads;
  const int64_t first = thread * per + std::min<int64_t>(thread, extra);
  const int64_t count = per + (thread < extra ? 1 : 0);
  const int64_t begin = std::min(m_items, first * m_grain);
  const int64_t end = std::min(m_items, (first + count) * m_grain);
  if (begin < end) (*m_fn)(begin, end, thread);
}

void ThreadPool::workerLoop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t now = m_generation.load(std::memory_order_acquire);
    for (int i = 0; now == seen && i < kSpinIterations; ++i) {
      SHOAL_CPU_RELAX();
      now = m_generation.load(std::memory_order_acquire);
    }
    while (now == seen) {
      m_generation.wait(seen, std::memory_order_acquire);
      now = m_generation.load(std::memory_order_acquire);
    }
    seen = now;
    if (m_stop.load(std::memory_order_acquire)) return;
    runChunk(thread);
    if (m_pending.fetch_sub(1, std::memory_order_acq_rel) == 1) m_pending.notify_one();
  }
}

void ThreadPool::parallelFor(int64_t items, const RangeFn& fn, int64_t grain) {
  if (items <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (m_threads == 1 || items <= grain) {
    fn(0, items, 0);
    return;
  }
  m_fn = &fn;
  m_items = items;
  m_grain = grain;
  m_pending.store(m_threads - 1, std::memory_order_relaxed);
  m_generation.fetch_add(1, std::memory_order_acq_rel);
  m_generation.notify_all();
  runChunk(0);
  int pending = m_pending.load(std::memory_order_acquire);
  for (int i = 0; pending != 0 && i < kSpinIterations; ++i) {
    SHOAL_CPU_RELAX();
    pending = m_pending.load(std::memory_order_acquire);
  }
  while (pending != 0) {
    m_pending.wait(pending, std::memory_order_acquire);
    pending = m_pending.load(std::memory_order_acquire);
  }
  m_fn = nullptr;
}

}  // namespace shoal::cpu
