#include "lan/api/bounded_task_queue.h"

#include <algorithm>

namespace shoal::api {

BoundedTaskQueue::BoundedTaskQueue(size_t threads, size_t maxPending)
    : m_maxPending(std::max<size_t>(maxPending, 1)) {
  threads = std::max<size_t>(threads, 1);
  m_workers.reserve(threads);
  for (size_t i = 0; i < threads; ++i) m_workers.emplace_back([this] { work(); });
}

BoundedTaskQueue::~BoundedTaskQueue() { shutdown(); }

void BoundedTaskQueue::enqueue(std::function<void()> task) {
  {
    std::unique_lock lock(m_mutex);
    m_spaceFree.wait(
        lock, [&] { return m_pending.size() < m_maxPending || m_stopWaiting || m_shutdown; });
    if (!m_shutdown) {
      m_pending.push_back(std::move(task));
      m_taskReady.notify_one();
      return;
    }
  }
  task();  // no workers left to run it
}

void BoundedTaskQueue::shutdown() {
  {
    std::lock_guard lock(m_mutex);
    m_shutdown = true;
  }
  m_taskReady.notify_all();
  m_spaceFree.notify_all();
  for (std::thread& worker : m_workers)
    if (worker.joinable()) worker.join();
}

void BoundedTaskQueue::stopWaiting() {
  {
    std::lock_guard lock(m_mutex);
    m_stopWaiting = true;
  }
  m_spaceFree.notify_all();
}

size_t BoundedTaskQueue::pending() const {
  std::lock_guard lock(m_mutex);
  return m_pending.size();
}

void BoundedTaskQueue::work() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(m_mutex);
      m_taskReady.wait(lock, [&] { return !m_pending.empty() || m_shutdown; });
      if (m_pending.empty()) return;  // shut down, and nothing left to run
      task = std::move(m_pending.front());
      m_pending.pop_front();
    }
    m_spaceFree.notify_one();
    task();
  }
}

}  // namespace shoal::api
