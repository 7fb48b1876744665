// WeightArena: the CPU stage's copy of its weights in huge pages. Every byte a matrix reads is
// found at its remapped address, overlapping and touching ranges share one copy, alignment
// modulo 64 is kept, the source is released chunk by chunk as it is copied, and
// SHOAL_CPU_WEIGHTS=mapped leaves everything in place.

#include <QtTest>
#include <algorithm>
#include <cstdint>
#include <cstdlib>
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

}  // namespace

class WeightArenaTest : public QObject {
  Q_OBJECT

 private slots:
  void copiesEveryAddedByteOnceAndRemapsInto() { check(1); }

  void copiesTheSameOnThreeThreads() { check(3); }

  void mappedModeCopiesNothing() {
    const std::vector<uint8_t> src = pattern(4096);
    qputenv("SHOAL_CPU_WEIGHTS", "mapped");
    WeightArena arena;
    arena.add(src.data(), src.size());
    int releases = 0;
    const bool copied = arena.build([&](const uint8_t*, size_t) { ++releases; });
    qunsetenv("SHOAL_CPU_WEIGHTS");
    QVERIFY(!copied);
    QCOMPARE(releases, 0);
    QCOMPARE(arena.bytes(), size_t{0});
    QCOMPARE(arena.remap(src.data() + 10), src.data() + 10);
  }

  void nothingAddedCopiesNothing() {
    WeightArena arena;
    arena.add(nullptr, 100);  // a matrix an op does not have
    QVERIFY(!arena.build({}));
    QCOMPARE(arena.bytes(), size_t{0});
  }

 private:
  void check(int threads) {
    const size_t size = size_t{12} << 20;  // three release chunks and more
    const std::vector<uint8_t> src = pattern(size);
    const uint8_t* s = src.data();
    // [100, 1000) and [500, 3000) overlap, [3000, 5000) touches them, [6 MiB + 7, 11 MiB) is on
    // its own (longer than a chunk), and [200, 300) repeats a piece of the first.
    const std::vector<std::pair<size_t, size_t>> ranges = {
        {100, 900}, {500, 2500}, {3000, 2000}, {(6u << 20) + 7, (5u << 20) - 7}, {200, 100}};
    WeightArena arena;
    for (const auto& [at, n] : ranges) arena.add(s + at, n);
    std::vector<std::pair<const uint8_t*, size_t>> released;
    std::mutex mutex;  // release may be called from any copying thread
    const bool copied = arena.build(
        [&](const uint8_t* p, size_t n) {
          const std::lock_guard lock(mutex);
          released.emplace_back(p, n);
        },
        threads);
    if (!copied) QSKIP("no copy on this machine (transparent huge pages off, or low memory)");

    // The two merged ranges, [100, 5000) and [6 MiB + 7, 11 MiB), and nothing else were copied.
    QCOMPARE(arena.bytes() >= 4900 + (5u << 20) - 7, true);
    QVERIFY(arena.bytes() < 4900 + (5u << 20) + 128);
    size_t releasedBytes = 0;
    for (const auto& [p, n] : released) {
      QVERIFY(n <= WeightArena::kChunkBytes);
      releasedBytes += n;
    }
    QCOMPARE(releasedBytes, size_t{4900} + (5u << 20) - 7);

    for (const auto& [at, n] : ranges) {
      const uint8_t* to = arena.remap(s + at);
      QVERIFY(to != s + at);
      QCOMPARE(reinterpret_cast<uintptr_t>(to) % 64, reinterpret_cast<uintptr_t>(s + at) % 64);
      QVERIFY(std::equal(s + at, s + at + n, to));
      // One copy per merged range: every byte of it is at the same distance from its start.
      QCOMPARE(arena.remap(s + at + n - 1), to + n - 1);
    }
    QCOMPARE(arena.remap(s + 150), arena.remap(s + 100) + 50);  // inside both overlapping ranges
    QCOMPARE(arena.remap(s + 4000), arena.remap(s + 100) + 3900);
    // Outside every range: unchanged.
    QCOMPARE(arena.remap(s + 50), s + 50);
    QCOMPARE(arena.remap(s + 5000), s + 5000);
    QCOMPARE(arena.remap(s + size - 1), s + size - 1);
    QCOMPARE(arena.remap(nullptr), static_cast<const uint8_t*>(nullptr));

    // Moving keeps the copy where it is.
    const uint8_t* before = arena.remap(s + 3000);
    WeightArena moved = std::move(arena);
    QCOMPARE(moved.remap(s + 3000), before);
    QVERIFY(std::equal(s + 3000, s + 5000, moved.remap(s + 3000)));
  }
};

QTEST_APPLESS_MAIN(WeightArenaTest)
#include "test_weight_arena.moc"
