// The API's connection queue (BoundedTaskQueue): what waits for a worker is bounded, a full queue
// holds the accept loop back, and stopping the server wakes an accept loop held there.

#include <QtTest>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>

#include "lan/api/bounded_task_queue.h"

using namespace shoal::api;
using namespace std::chrono_literals;

namespace {

// A task that holds its worker until open() is called.
class Gate {
 public:
  std::function<void()> task() {
    return [this] {
      std::unique_lock lock(m_mutex);
      m_entered = true;
      m_changed.notify_all();
      m_changed.wait(lock, [&] { return m_open; });
    };
  }
  bool waitEntered() {
    std::unique_lock lock(m_mutex);
    return m_changed.wait_for(lock, 10s, [&] { return m_entered; });
  }
  void open() {
    std::lock_guard lock(m_mutex);
    m_open = true;
    m_changed.notify_all();
  }

 private:
  std::mutex m_mutex;
  std::condition_variable m_changed;
  bool m_entered = false;
  bool m_open = false;
};

}  // namespace

class TestBoundedTaskQueue : public QObject {
  Q_OBJECT

 private slots:
  void aFullQueueHoldsEnqueueUntilAWorkerTakesATask() {
    BoundedTaskQueue queue(1, 1);
    Gate busy;
    queue.enqueue(busy.task());
    QVERIFY(busy.waitEntered());  // the only worker is held
    queue.enqueue([] {});         // the one pending place
    QCOMPARE(queue.pending(), size_t(1));
    auto third = std::async(std::launch::async, [&] { queue.enqueue([] {}); });
    QVERIFY(third.wait_for(200ms) == std::future_status::timeout);  // held back
    busy.open();
    QVERIFY(third.wait_for(10s) == std::future_status::ready);
    queue.shutdown();
    QCOMPARE(queue.pending(), size_t(0));
  }

  void stopWaitingReleasesAHeldEnqueue() {
    BoundedTaskQueue queue(1, 1);
    Gate busy;
    queue.enqueue(busy.task());
    QVERIFY(busy.waitEntered());
    queue.enqueue([] {});
    auto held = std::async(std::launch::async, [&] { queue.enqueue([] {}); });
    QVERIFY(held.wait_for(200ms) == std::future_status::timeout);
    queue.stopWaiting();  // what stopping the server does
    QVERIFY(held.wait_for(10s) == std::future_status::ready);
    busy.open();
    queue.shutdown();
  }

  void shutdownRunsWhatIsQueued() {
    std::atomic<int> ran{0};
    BoundedTaskQueue queue(2, 8);
    for (int i = 0; i < 8; ++i) queue.enqueue([&] { ++ran; });
    queue.shutdown();
    QCOMPARE(ran.load(), 8);
    queue.enqueue([&] { ++ran; });  // after shutdown: run on the caller's thread
    QCOMPARE(ran.load(), 9);
  }
};

QTEST_APPLESS_MAIN(TestBoundedTaskQueue)
#include "test_bounded_task_queue.moc"
