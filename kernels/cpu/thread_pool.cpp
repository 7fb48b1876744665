#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SHOAL_CPU_RELAX() _mm_pause()
#else
#define SHOAL_CPU_RELAX() ((void)0)
#endif

namespace shoal::cpu {
namespace {

// Spinning: longer than the gap between two ops of a token (a few microseconds), much shorter
// than an OS time slice, so a pool sharing its cores with other work soon gets out of the way.
constexpr auto kSpin = std::chrono::microseconds(30);
constexpr int64_t kMaxChunks = 0xFFFF;  // the claim word's 16 bits

// Spins until pred() or kSpin has passed; returns pred().
template <typename Pred>
bool spinFor(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 16; ++i) {
      if (pred()) return true;
      SHOAL_CPU_RELAX();
    }
    if (std::chrono::steady_clock::now() > deadline) return pred();
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) : m_threads(std::max(1, threads)) {
  m_workers.reserve(static_cast<size_t>(m_threads - 1));
  for (int t = 1; t < m_threads; ++t) m_workers.emplace_back([this, t] { workerLoop(t); });
}

ThreadPool::~ThreadPool() {
  m_stop.store(true);
  {
    std::lock_guard lock(m_mutex);
    m_generation.fetch_add(1);
  }
  m_jobPosted.notify_all();
  for (auto& w : m_workers) w.join();
}

void ThreadPool::work(uint32_t job, int thread) {
  uint64_t claim = m_claim.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(claim >> 32) != job) return;
    const auto chunks = static_cast<uint32_t>((claim >> 16) & 0xFFFF);
    const auto chunk = static_cast<uint32_t>(claim & 0xFFFF);
    if (chunk >= chunks) return;
    if (!m_claim.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
      continue;
    }
    const int64_t begin = static_cast<int64_t>(chunk) * m_chunkItems;
    const int64_t end = std::min(m_items, begin + m_chunkItems);
    m_invoke(m_fn, begin, end, thread);
    if (m_done.fetch_add(1) + 1 == chunks && m_callerSleeps.load()) {
      std::lock_guard lock(m_mutex);
      m_jobDone.notify_one();
    }
    claim = m_claim.load(std::memory_order_acquire);
  }
}

void ThreadPool::workerLoop(int thread) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t now = m_generation.load(std::memory_order_acquire);
    if (now == seen) {
      spinFor([&] { return (now = m_generation.load(std::memory_order_acquire)) != seen; });
    }
    if (now == seen) {
      std::unique_lock lock(m_mutex);
      m_sleepers.fetch_add(1);
      m_jobPosted.wait(lock, [&] { return (now = m_generation.load()) != seen; });
      m_sleepers.fetch_sub(1);
    }
    seen = now;
    if (m_stop.load(std::memory_order_acquire)) return;
    work(now, thread);
  }
}

void ThreadPool::run(int64_t items, int64_t grain, int chunksPerThread, void* fn, Invoke invoke) {
  if (items <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t units = (items + grain - 1) / grain;
  if (m_threads == 1 || units == 1) {
    invoke(fn, 0, items, 0);
    return;
  }
  const int64_t chunks =
      std::min({units, int64_t{m_threads} * std::max(1, chunksPerThread), kMaxChunks});
  m_fn = fn;
  m_invoke = invoke;
  m_items = items;
  m_chunkItems = (units + chunks - 1) / chunks * grain;
  const auto chunkCount = static_cast<uint32_t>((items + m_chunkItems - 1) / m_chunkItems);
  m_done.store(0, std::memory_order_relaxed);
  const uint32_t job = m_generation.load(std::memory_order_relaxed) + 1;
  m_claim.store((static_cast<uint64_t>(job) << 32) | (static_cast<uint64_t>(chunkCount) << 16),
                std::memory_order_release);
  m_generation.store(job);
  if (m_sleepers.load() > 0) {
    std::lock_guard lock(m_mutex);
    m_jobPosted.notify_all();
  }

  work(job, 0);
  uint32_t done = m_done.load(std::memory_order_acquire);
  if (done != chunkCount) {
    spinFor([&] { return (done = m_done.load(std::memory_order_acquire)) == chunkCount; });
  }
  if (done != chunkCount) {
    std::unique_lock lock(m_mutex);
    m_callerSleeps.store(true);
    m_jobDone.wait(lock, [&] { return m_done.load() == chunkCount; });
    m_callerSleeps.store(false);
  }
}

}  // namespace shoal::cpu
