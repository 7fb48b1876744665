// ThreadPool::parallelFor: every item runs exactly once, on chunks aligned to the grain, the
// work shared between threads; repeated jobs and degenerate sizes work.

#include <QtTest>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "kernels/cpu/thread_pool.h"

using shoal::cpu::ThreadPool;

class ThreadPoolTest : public QObject {
  Q_OBJECT

 private slots:
  void everyItemRunsExactlyOnce_data() {
    QTest::addColumn<int>("threads");
    QTest::addColumn<int>("items");
    QTest::addColumn<int>("grain");
    for (int threads : {1, 2, 3, 4}) {
      for (int items : {1, 2, 3, 7, 64, 1001}) {
        for (int grain : {1, 4, 16}) {
          QTest::addRow("t%d/n%d/g%d", threads, items, grain) << threads << items << grain;
        }
      }
    }
  }
  void everyItemRunsExactlyOnce() {
    QFETCH(int, threads);
    QFETCH(int, items);
    QFETCH(int, grain);
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> hits(static_cast<size_t>(items));
    std::atomic<bool> misaligned{false}, badThread{false};
    pool.parallelFor(
        items,
        [&](int64_t begin, int64_t end, int thread) {
          if (begin % grain != 0) misaligned = true;
          if (thread < 0 || thread >= threads) badThread = true;
          for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
        },
        grain);
    for (const auto& h : hits) QCOMPARE(h.load(), 1);
    QVERIFY(!misaligned);
    QVERIFY(!badThread);
  }

  void manyJobsInARowAllComplete() {
    ThreadPool pool(2);
    std::atomic<int64_t> total{0};
    for (int job = 0; job < 2000; ++job) {
      pool.parallelFor(17, [&](int64_t begin, int64_t end, int) { total += end - begin; });
    }
    QCOMPARE(total.load(), int64_t{2000 * 17});
  }

  // Chunks are claimed: a job long enough for the worker to wake up is shared.
  void workersTakePartInALongJob() {
    ThreadPool pool(2);
    std::atomic<int> used[2] = {0, 0};
    pool.parallelFor(8, [&](int64_t, int64_t, int thread) {
      used[thread]++;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
    QVERIFY(used[0].load() >= 1);
    QVERIFY(used[1].load() >= 1);
    QCOMPARE(used[0].load() + used[1].load(), 8);
  }

  // More threads than this machine's cores: threads the OS keeps waiting must not lose or
  // repeat chunks.
  void jobsCompleteWithMoreThreadsThanCores() {
    ThreadPool pool(6);
    std::atomic<int> total{0};
    for (int job = 0; job < 200; ++job) {
      pool.parallelFor(
          64, [&](int64_t b, int64_t e, int) { total += static_cast<int>(e - b); }, 4);
    }
    QCOMPARE(total.load(), 200 * 64);
  }

  // Jobs spaced wider than the spin: workers go to sleep between them and must be woken for
  // each; slow chunks make the caller sleep too. A lost wake-up would hang here.
  void sleepingThreadsWakeForEveryJob() {
    ThreadPool pool(2);
    std::atomic<int64_t> total{0};
    for (int job = 0; job < 300; ++job) {
      pool.parallelFor(8, [&](int64_t b, int64_t e, int thread) {
        if (thread == 1 && job % 3 == 0)
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        total += e - b;
      });
      if (job % 2 == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    QCOMPARE(total.load(), int64_t{300 * 8});
  }

  void zeroItemsRunsNothing() {
    ThreadPool pool(2);
    bool ran = false;
    pool.parallelFor(0, [&](int64_t, int64_t, int) { ran = true; });
    QVERIFY(!ran);
  }

  void sizeIsAtLeastOne() {
    QCOMPARE(ThreadPool(0).size(), 1);
    QCOMPARE(ThreadPool(3).size(), 3);
  }
};

QTEST_GUILESS_MAIN(ThreadPoolTest)
#include "test_thread_pool.moc"
