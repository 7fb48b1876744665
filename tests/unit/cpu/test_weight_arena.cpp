// WeightArena: the CPU stage's background copy of its weights into huge pages, unit by unit.
// Every byte added is found at its remapped address once its unit is copied and at its own
// address before; units are copied in order and reported once each; overlapping ranges share one
// copy with the lower unit, ranges that only touch across units stay apart; each range's source
// is handed to the release callback once, chunk by chunk, as it is copied; alignment modulo 64 is
// kept; a stop leaves the copy consistent; SHOAL_CPU_WEIGHTS=mapped copies nothing.

#include <QtTest>
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "kernels/cpu/weight_arena.h"

using shoal::cpu::WeightArena;

namespace {

std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> v(n);
  uint32_t x = 12345;
  for (uint8_t& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

// Starts an arena's copy and holds it after its first chunk (in the release callback, which
// runs after each chunk) until release(); start() returns once that chunk is copied, or false
// when the copy does not start.
class HeldAfterFirstChunk {
 public:
  bool start(WeightArena& arena) {
    if (!arena.start({}, [this](const uint8_t*, size_t) {
          std::unique_lock lock(m_mutex);
          ++m_chunks;
          m_changed.notify_all();
          if (m_chunks == 1) m_changed.wait(lock, [this] { return m_go; });
        })) {
      return false;
    }
    std::unique_lock lock(m_mutex);
    m_changed.wait(lock, [this] { return m_chunks >= 1; });
    return true;
  }
  void release() {
    {
      const std::lock_guard lock(m_mutex);
      m_go = true;
    }
    m_changed.notify_all();
  }

 private:
  std::mutex m_mutex;
  std::condition_variable m_changed;
  int m_chunks = 0;
  bool m_go = false;
};

// A (unit, offset, bytes) range of the test's source.
struct Added {
  size_t unit, at, bytes;
};

}  // namespace

class WeightArenaTest : public QObject {
  Q_OBJECT

 private slots:
  void copiesEveryAddedByteUnitByUnit() {
    const size_t size = size_t{12} << 20;  // several stop-check chunks
    const std::vector<uint8_t> src = pattern(size);
    const uint8_t* s = src.data();
    // Unit 0: [100, 1000) and [500, 3000) overlap, [200, 300) repeats a piece of them.
    // Unit 1: [3000, 5000) touches unit 0's range (and stays apart from it), [2900, 2950) lies
    // inside unit 0's (and is copied with it). Unit 2: [6 MiB + 7, 11 MiB), longer than a chunk.
    const std::vector<Added> ranges = {{0, 100, 900}, {0, 500, 2500},
                                       {0, 200, 100}, {1, 3000, 2000},
                                       {1, 2900, 50}, {2, (6u << 20) + 7, (5u << 20) - 7}};
    WeightArena arena;
    for (const Added& r : ranges) arena.add(r.unit, s + r.at, r.bytes);
    QCOMPARE(arena.units(), size_t{3});
    std::vector<std::pair<size_t, bool>> reports;
    std::vector<size_t> seenCopied;                   // copiedUnits() as each report is made
    std::vector<std::pair<size_t, size_t>> released;  // (offset in src, bytes)
    const bool started = arena.start(
        [&](size_t copied, bool last) {
          reports.emplace_back(copied, last);
          seenCopied.push_back(arena.copiedUnits());
        },
        [&](const uint8_t* p, size_t n) { released.emplace_back(static_cast<size_t>(p - s), n); });
    if (!started) QSKIP("no copy on this machine (transparent huge pages off, or low memory)");
    arena.wait();
    QCOMPARE(arena.copiedUnits(), size_t{3});
    const std::vector<std::pair<size_t, bool>> expected = {{1, false}, {2, false}, {3, true}};
    QCOMPARE(reports, expected);
    QCOMPARE(seenCopied, (std::vector<size_t>{1, 2, 3}));

    // Each merged range's source was released once, chunk by chunk in order, unit by unit.
    using Pieces = std::vector<std::pair<size_t, size_t>>;
    Pieces releasedRanges;
    for (const auto& [at, n] : released) {
      QVERIFY(n <= WeightArena::kChunkBytes);
      if (!releasedRanges.empty() &&
          releasedRanges.back().first + releasedRanges.back().second == at) {
        releasedRanges.back().second += n;
      } else {
        releasedRanges.emplace_back(at, n);
      }
    }
    QCOMPARE(releasedRanges, (Pieces{{100, 4900}, {(6u << 20) + 7, (5u << 20) - 7}}));
    QVERIFY(released.size() >= 2 + 5);

    // [100, 3000), [3000, 5000) and [6 MiB + 7, 11 MiB) were copied, and nothing else.
    const size_t copiedBytes = 2900 + 2000 + (5u << 20) - 7;
    QVERIFY(arena.bytes() >= copiedBytes);
    QVERIFY(arena.bytes() < copiedBytes + 3 * 128);
    for (const Added& r : ranges) {
      const uint8_t* to = arena.remap(s + r.at);
      QVERIFY(to != s + r.at);
      QCOMPARE(reinterpret_cast<uintptr_t>(to) % 32, reinterpret_cast<uintptr_t>(s + r.at) % 32);
      QVERIFY(std::equal(s + r.at, s + r.at + r.bytes, to));
      QCOMPARE(arena.remap(s + r.at + r.bytes - 1), to + r.bytes - 1);  // one piece
    }
    QCOMPARE(arena.remap(s + 2900), arena.remap(s + 100) + 2800);  // in unit 0's copy
    // Outside every range: unchanged.
    QCOMPARE(arena.remap(s + 50), s + 50);
    QCOMPARE(arena.remap(s + 5000), s + 5000);
    QCOMPARE(arena.remap(s + size - 1), s + size - 1);
    QCOMPARE(arena.remap(nullptr), static_cast<const uint8_t*>(nullptr));

    // forEachRange: each unit gives back exactly its merged source ranges.
    std::vector<std::vector<std::pair<size_t, size_t>>> byUnit(3);
    for (size_t u = 0; u < 3; ++u) {
      arena.forEachRange(u, [&](const uint8_t* p, size_t n) {
        byUnit[u].emplace_back(static_cast<size_t>(p - s), n);
      });
    }
    QCOMPARE(byUnit[0], (Pieces{{100, 2900}}));
    QCOMPARE(byUnit[1], (Pieces{{3000, 2000}}));
    QCOMPARE(byUnit[2], (Pieces{{(6u << 20) + 7, (5u << 20) - 7}}));
  }

  // The reader sees a unit in the copy only once it is copied: the callback for unit 1 holds
  // the copying thread while the test looks.
  // A range on a 32-byte boundary (GGUF's default tensor alignment) begins on a 64-byte cache
  // line in the copy, whichever it began at in the file; other ranges keep their address modulo
  // 32 (the alignment of what they hold).
  void aRangeOnA32ByteBoundaryBeginsOnACacheLine() {
    const std::vector<uint8_t> src = pattern(size_t{1} << 20);
    const auto base = reinterpret_cast<uintptr_t>(src.data());
    const size_t at32 = 1024 + (96 - base % 64) % 64;  // s + at32 = 32 mod 64
    const size_t at4 = 8192 + (68 - base % 64) % 64;   // 4 mod 64
    const size_t at0 = 16384 + (64 - base % 64) % 64;  // 0 mod 64
    WeightArena arena;
    arena.add(0, src.data() + at32, 1000);
    arena.add(1, src.data() + at4, 1000);
    arena.add(2, src.data() + at0, 1000);
    if (!arena.start([](size_t, bool) {}, [](const uint8_t*, size_t) {})) {
      QSKIP("no copy on this machine (transparent huge pages off, or low memory)");
    }
    arena.wait();
    auto mod64 = [&](size_t at) {
      return reinterpret_cast<uintptr_t>(arena.remap(src.data() + at)) % 64;
    };
    QCOMPARE((base + at32) % 64, uintptr_t{32});
    QCOMPARE(mod64(at32), uintptr_t{0});
    QCOMPARE(mod64(at4) % 32, uintptr_t{4});
    QCOMPARE(mod64(at0), uintptr_t{0});
    for (size_t at : {at32, at4, at0}) {
      QVERIFY(std::equal(src.data() + at, src.data() + at + 1000, arena.remap(src.data() + at)));
    }
  }

  void aUnitNotYetCopiedStaysInPlace() {
    const std::vector<uint8_t> src = pattern(size_t{3} << 20);
    const uint8_t* s = src.data();
    WeightArena arena;
    arena.add(0, s, size_t{1} << 20);
    arena.add(1, s + (size_t{1} << 20), size_t{1} << 20);
    arena.add(2, s + (size_t{2} << 20), size_t{1} << 20);
    std::mutex mutex;
    std::condition_variable changed;
    bool atUnitOne = false, go = false;
    const bool started = arena.start([&](size_t copied, bool) {
      if (copied != 1) return;
      std::unique_lock lock(mutex);
      atUnitOne = true;
      changed.notify_all();
      changed.wait(lock, [&] { return go; });
    });
    if (!started) QSKIP("no copy on this machine (transparent huge pages off, or low memory)");
    {
      std::unique_lock lock(mutex);
      changed.wait(lock, [&] { return atUnitOne; });
    }
    QCOMPARE(arena.copiedUnits(), size_t{1});
    QVERIFY(arena.remap(s + 10) != s + 10);
    QVERIFY(std::equal(s, s + (size_t{1} << 20), arena.remap(s)));
    QCOMPARE(arena.remap(s + (size_t{1} << 20) + 10), s + (size_t{1} << 20) + 10);
    QCOMPARE(arena.remap(s + (size_t{2} << 20)), s + (size_t{2} << 20));
    {
      const std::lock_guard lock(mutex);
      go = true;
    }
    changed.notify_all();
    arena.wait();
    QCOMPARE(arena.copiedUnits(), size_t{3});
    for (size_t u = 0; u < 3; ++u) {
      const uint8_t* p = s + (u << 20);
      QVERIFY(std::equal(p, p + (size_t{1} << 20), arena.remap(p)));
    }
  }

  // While a unit is being copied, copiedPrefix() gives the part of a reader's range already in
  // the copy (whole chunks: the copy's release callback runs after each), and nothing for a
  // range with a transform, a unit not yet reached, or once the unit is published.
  void theRangeInFlightShowsItsCopiedPrefix() {
    const std::vector<uint8_t> src = pattern(size_t{4} << 20);
    const uint8_t* s = src.data();
    const size_t mib = size_t{1} << 20;
    WeightArena arena;
    arena.add(0, s, 3 * mib);                                     // 3 chunks
    arena.add(1, s + 3 * mib, mib / 2, [](uint8_t*, size_t) {});  // transformed
    arena.add(1, s + 3 * mib + mib / 2, mib / 2);
    HeldAfterFirstChunk hold;
    if (!hold.start(arena)) {
      QSKIP("no copy on this machine (transparent huge pages off, or low memory)");
    }
    const uint8_t* copy = nullptr;
    // A reader of rows from byte 1000 on: the first chunk less those 1000 bytes is copied.
    QCOMPARE(arena.copiedPrefix(s + 1000, 2 * mib, &copy), mib - 1000);
    QVERIFY(std::equal(s + 1000, s + mib, copy));
    QCOMPARE(arena.copiedPrefix(s + 1000, 100, &copy), size_t{100});   // clipped to the request
    QCOMPARE(arena.copiedPrefix(s + 2 * mib, mib, &copy), size_t{0});  // not copied yet
    QCOMPARE(arena.copiedPrefix(s + 3 * mib, mib / 2, &copy), size_t{0});
    QCOMPARE(arena.remap(s + 1000), s + 1000);  // the unit is not published
    hold.release();
    arena.wait();
    QCOMPARE(arena.copiedPrefix(s + 1000, mib, &copy), size_t{0});  // published: remap() it
    QVERIFY(arena.remap(s + 1000) != s + 1000);
    QCOMPARE(arena.copiedPrefix(s + 3 * mib + mib / 2, 10, &copy), size_t{0});
  }

  // A transform with a granule rewrites each chunk as it is copied (whole granules: a chunk is
  // the largest multiple of the granule within kChunkBytes), so the range in flight shows a
  // prefix already transformed; the release callback runs after the chunk is rewritten.
  void aTransformWithAGranuleShowsItsTransformedPrefix() {
    const size_t granule = 3072;  // does not divide kChunkBytes
    const size_t bytes = granule * 1000;
    const std::vector<uint8_t> src = pattern(bytes);
    const uint8_t* s = src.data();
    auto invert = [](uint8_t* copy, size_t n) {
      QCOMPARE(n % 3072, size_t{0});
      for (size_t i = 0; i < n; ++i) copy[i] = static_cast<uint8_t>(~copy[i]);
    };
    WeightArena arena;
    arena.add(0, s, bytes, invert, granule);
    HeldAfterFirstChunk hold;
    if (!hold.start(arena)) {
      QSKIP("no copy on this machine (transparent huge pages off, or low memory)");
    }
    const size_t chunk = WeightArena::kChunkBytes / granule * granule;
    const uint8_t* copy = nullptr;
    bool transformed = false;
    // A reader from granule 2 on.
    QCOMPARE(arena.copiedPrefix(s + 2 * granule, bytes, &copy, &transformed), chunk - 2 * granule);
    QVERIFY(transformed);
    for (size_t i = 0; i < chunk - 2 * granule; i += 97) {
      QCOMPARE(copy[i], static_cast<uint8_t>(~s[2 * granule + i]));
    }
    hold.release();
    arena.wait();
    QVERIFY(arena.transformed(s));
    const uint8_t* all = arena.remap(s);
    for (size_t i = 0; i < bytes; i += 101) QCOMPARE(all[i], static_cast<uint8_t>(~s[i]));
  }

  // A stop leaves copiedUnits() where the copy got to, and remap() agrees with it.
  void aStoppedCopyIsConsistent() {
    const size_t unitBytes = size_t{4} << 20;
    const std::vector<uint8_t> src = pattern(8 * unitBytes);
    const uint8_t* s = src.data();
    WeightArena arena;
    for (size_t u = 0; u < 8; ++u) arena.add(u, s + u * unitBytes, unitBytes);
    bool sawLast = false;
    if (!arena.start([&](size_t, bool last) { sawLast = sawLast || last; })) {
      QSKIP("no copy on this machine (transparent huge pages off, or low memory)");
    }
    arena.stop();
    const size_t copied = arena.copiedUnits();
    QVERIFY(copied <= 8);
    QCOMPARE(sawLast, copied == 8);
    for (size_t u = 0; u < 8; ++u) {
      const uint8_t* p = s + u * unitBytes + 123;
      if (u < copied) {
        QVERIFY(arena.remap(p) != p);
        QVERIFY(std::equal(p, p + 1000, arena.remap(p)));
      } else {
        QCOMPARE(arena.remap(p), p);
      }
    }
    arena.stop();  // twice is harmless
    arena.wait();
  }

  // A transform rewrites its range in the copy before the unit is published; a range another
  // range overlaps keeps its bytes (the other's readers read them as they are).
  void aTransformRewritesOnlyARangeOfItsOwn() {
    const std::vector<uint8_t> src = pattern(size_t{3} << 20);
    const uint8_t* s = src.data();
    auto invert = [](uint8_t* copy, size_t n) {
      for (size_t i = 0; i < n; ++i) copy[i] = static_cast<uint8_t>(~copy[i]);
    };
    WeightArena arena;
    arena.add(0, s + 64, 4096, invert);                            // its own range
    arena.add(1, s + 8192, 4096, invert);                          // overlapped by unit 2's
    arena.add(2, s + 10000, 4096);                                 //
    arena.add(3, s + (size_t{1} << 20), size_t{1} << 20, invert);  // longer than a chunk
    QCOMPARE(arena.transformed(s + 64), false);                    // not started
    if (!arena.start()) QSKIP("no weight copy on this machine (transparent huge pages off)");
    arena.wait();
    QVERIFY(arena.transformed(s + 64));
    QVERIFY(arena.transformed(s + 64 + 4095));
    QVERIFY(!arena.transformed(s + 64 + 4096));
    QVERIFY(!arena.transformed(s + 8192));
    QVERIFY(arena.transformed(s + (size_t{3} << 19)));
    QCOMPARE(arena.transformedRanges(), size_t{2});
    const uint8_t* a = arena.remap(s + 64);
    for (size_t i = 0; i < 4096; ++i) QCOMPARE(a[i], static_cast<uint8_t>(~s[64 + i]));
    const uint8_t* b = arena.remap(s + 8192);
    QVERIFY(std::equal(b, b + 4096 + 1808, s + 8192));
    const uint8_t* c = arena.remap(s + (size_t{1} << 20));
    for (size_t i = 0; i < (size_t{1} << 20); i += 4099) {
      QCOMPARE(c[i], static_cast<uint8_t>(~s[(size_t{1} << 20) + i]));
    }
  }

  void mappedModeCopiesNothing() {
    const std::vector<uint8_t> src = pattern(4096);
    qputenv("SHOAL_CPU_WEIGHTS", "mapped");
    WeightArena arena;
    arena.add(0, src.data(), src.size());
    int reports = 0;
    const bool started = arena.start([&](size_t, bool) { ++reports; });
    qunsetenv("SHOAL_CPU_WEIGHTS");
    QVERIFY(!started);
    arena.wait();
    QCOMPARE(reports, 0);
    QCOMPARE(arena.bytes(), size_t{0});
    QCOMPARE(arena.copiedUnits(), size_t{0});
    QCOMPARE(arena.remap(src.data() + 10), src.data() + 10);
    int ranges = 0;
    arena.forEachRange(0, [&](const uint8_t*, size_t) { ++ranges; });
    QCOMPARE(ranges, 0);
  }

  void nothingAddedCopiesNothing() {
    WeightArena arena;
    arena.add(0, nullptr, 100);  // a matrix an op does not have
    QVERIFY(!arena.start());
    QCOMPARE(arena.bytes(), size_t{0});
    QCOMPARE(arena.units(), size_t{0});
  }
};

QTEST_APPLESS_MAIN(WeightArenaTest)
#include "test_weight_arena.moc"
