// ZeroedBuffer: the stage's activations and KV cache. It reads as zeros, grows without
// shrinking, moves without copying, and (on Linux) only the pages written become resident, so
// a stage sized for 512-token batches and a long context costs memory as it is used.

#include <QtTest>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cpu/zeroed_buffer.h"

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

using shoal::cpu::ZeroedBuffer;

namespace {

#if defined(__linux__)
// Resident pages of [p, p + bytes), by mincore().
int64_t residentPages(const void* p, size_t bytes) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  std::vector<unsigned char> vec((end - begin + page - 1) / page);
  if (mincore(reinterpret_cast<void*>(begin), end - begin, vec.data()) != 0) return -1;
  int64_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}
#endif

}  // namespace

class ZeroedBufferTest : public QObject {
  Q_OBJECT

 private slots:
  void readsZerosAtEverySize() {
    for (size_t count : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
      ZeroedBuffer<float> b(count);
      QCOMPARE(b.size(), count);
      for (size_t i = 0; i < count; i += 997) QCOMPARE(b[i], 0.0f);
      QCOMPARE(b[count - 1], 0.0f);
    }
  }

  void reserveGrowsToZerosAndNeverShrinks() {
    ZeroedBuffer<uint8_t> b;
    QCOMPARE(b.size(), size_t{0});
    b.reserve(100);
    QCOMPARE(b.size(), size_t{100});
    b[5] = 7;
    b.reserve(50);  // smaller: kept as is
    QCOMPARE(b.size(), size_t{100});
    QCOMPARE(b[5], uint8_t{7});
    b.reserve(1 << 20);
    QCOMPARE(b.size(), size_t{1} << 20);
    QCOMPARE(b[5], uint8_t{0});
  }

  void moveTransfersTheMemory() {
    ZeroedBuffer<uint16_t> a(1 << 18);
    a[3] = 42;
    const uint16_t* data = a.data();
    ZeroedBuffer<uint16_t> b(std::move(a));
    QCOMPARE(b.data(), data);
    QCOMPARE(b[3], uint16_t{42});
    QCOMPARE(a.size(), size_t{0});  // NOLINT(bugprone-use-after-move): the moved-from state
    std::vector<ZeroedBuffer<uint16_t>> many(3);
    many[1] = std::move(b);
    QCOMPARE(many[1].data(), data);
  }

  void onlyWrittenPagesBecomeResident() {
#if defined(__linux__)
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t bytes = 64 * page * 16;  // 1024 pages (4 MiB with 4 KiB pages)
    ZeroedBuffer<uint8_t> b(bytes);
    QCOMPARE(residentPages(b.data(), bytes), int64_t{0});
    for (size_t i = 0; i < 8; ++i) b[i * page] = 1;  // the first 8 pages
    volatile uint8_t sink = b[bytes - 1];            // a read maps the shared zero page
    (void)sink;
    const int64_t resident = residentPages(b.data(), bytes);
    // 8 written pages, plus at most one huge page's worth where the kernel backs anonymous
    // memory with transparent huge pages ("always" mode); never the whole buffer.
    QVERIFY2(resident >= 8, qPrintable(QString::number(resident)));
    QVERIFY2(resident <= 8 + static_cast<int64_t>((2u << 20) / page),
             qPrintable(QString::number(resident)));
#else
    QSKIP("residency is checked with Linux's mincore()");
#endif
  }
};

QTEST_APPLESS_MAIN(ZeroedBufferTest)
#include "test_zeroed_buffer.moc"
