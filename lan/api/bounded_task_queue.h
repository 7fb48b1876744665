#pragma once
// cpp-httplib's task queue with a bound on what waits. The library's own ThreadPool (0.11.4)
// queues every accepted socket without limit, so idle connections pile up as open descriptors
// until the process hits EMFILE, which also stops the pool listener of the same process. Here a
// fixed set of workers serves at most `maxPending` waiting connections; when they are all taken,
// enqueue() blocks the accept loop until a worker picks one up. What arrives meanwhile waits in
// the kernel's listen backlog, which costs the process no descriptor.

#include <httplib.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace shoal::api {

class BoundedTaskQueue final : public httplib::TaskQueue {
 public:
  // `threads` workers (at least one), at most `maxPending` (at least one) tasks waiting for them.
  BoundedTaskQueue(size_t threads, size_t maxPending);
  ~BoundedTaskQueue() override;  // shutdown()

  BoundedTaskQueue(const BoundedTaskQueue&) = delete;
  BoundedTaskQueue& operator=(const BoundedTaskQueue&) = delete;

  // Queues `task`; blocks while `maxPending` tasks wait, until a worker takes one, stopWaiting()
  // or shutdown(). After shutdown() runs `task` on the caller's thread (it closes its socket).
  void enqueue(std::function<void()> task) override;
  // Runs what is queued, then joins the workers. The library calls it when its accept loop ends.
  void shutdown() override;
  // From then on enqueue() never blocks: the server is stopping, and the accept loop that is
  // blocked in enqueue() must get back to see that (one more task, run at once by the server's
  // stopped check, is queued beyond the bound). Thread-safe.
  void stopWaiting();

  size_t pending() const;  // tasks waiting for a worker

 private:
  void work();

  const size_t m_maxPending;
  mutable std::mutex m_mutex;           // guards the fields below
  std::condition_variable m_taskReady;  // a task was queued, or shutdown
  std::condition_variable m_spaceFree;  // a worker took a task, or stopWaiting / shutdown
  std::deque<std::function<void()>> m_pending;
  bool m_stopWaiting = false;
  bool m_shutdown = false;
  std::vector<std::thread> m_workers;  // started in the constructor, joined by shutdown()
};

}  // namespace shoal::api
