// The node's shard cache (lan/node/shard_cache.h) on small files: a total cap with
// least-recently-used eviction that never removes a shard in use, shards filed under the
// coordinator that streamed them, and what an interrupted stream left removed at start.

#include <QtTest>
#include <filesystem>
#include <fstream>

#include "engine/error.h"
#include "lan/node/shard_cache.h"

using namespace shoal;
using namespace shoal::lan;
namespace fs = std::filesystem;

namespace {

const std::string kModel(64, 'a');  // a model SHA-256

// What a finished stream does: reserve, write the file, commit (returns the file's pin).
ShardCache::Pin stream(ShardCache& cache, const fs::path& shard, uint64_t bytes) {
  auto reservation = cache.reserve();
  reservation->grow(bytes);
  fs::create_directories(shard.parent_path());
  std::ofstream(shard, std::ios::binary) << std::string(bytes, 'x');
  return reservation->commit(shard);
}

void writeFile(const fs::path& p, uint64_t bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << std::string(bytes, 'x');
}

}  // namespace

class TestShardCache : public QObject {
  Q_OBJECT

  fs::path m_dir;

  fs::path root(const std::string& name) { return m_dir / name / "shards"; }

 private slots:
  void init() {
    m_dir = fs::temp_directory_path() /
            ("shoal-shard-cache-" + std::to_string(QCoreApplication::applicationPid()));
    fs::remove_all(m_dir);
  }
  void cleanup() { fs::remove_all(m_dir); }

  void leastRecentlyUsedShardIsEvictedToMakeRoom() {
    ShardCache cache(root("lru"), 300);
    const auto a = cache.pathFor("PEER", kModel, 0, 1);
    const auto b = cache.pathFor("PEER", kModel, 1, 2);
    const auto c = cache.pathFor("PEER", kModel, 2, 3);
    { stream(cache, a, 100); }
    { stream(cache, b, 100); }
    { stream(cache, c, 100); }
    { cache.acquire(a); }  // a used again: b is now the least recently used
    { stream(cache, cache.pathFor("PEER", kModel, 3, 4), 100); }
    QVERIFY(fs::exists(a));
    QVERIFY(!fs::exists(b));
    QVERIFY(!cache.contains(b));
    QVERIFY(fs::exists(c));
    QCOMPARE(cache.usedBytes(), uint64_t{300});
  }

  void shardInUseIsNeverEvicted() {
    ShardCache cache(root("pinned"), 250);
    const auto a = cache.pathFor("PEER", kModel, 0, 1);
    ShardCache::Pin held = stream(cache, a, 200);
    auto reservation = cache.reserve();
    QVERIFY_THROWS_EXCEPTION(Error, reservation->grow(100));
    QVERIFY(fs::exists(a));
  }

  void streamLargerThanTheCapIsRefusedWithoutEvictingAnything() {
    ShardCache cache(root("too-big"), 250);
    const auto a = cache.pathFor("PEER", kModel, 0, 1);
    { stream(cache, a, 200); }
    auto reservation = cache.reserve();
    QVERIFY_THROWS_EXCEPTION(Error, reservation->grow(251));
    QVERIFY(fs::exists(a));
  }

  void abandonedReservationGivesItsRoomBack() {
    ShardCache cache(root("abandoned"), 250);
    {
      auto reservation = cache.reserve();
      reservation->grow(200);
      QCOMPARE(cache.usedBytes(), uint64_t{200});
    }
    QCOMPARE(cache.usedBytes(), uint64_t{0});
  }

  void cacheOverItsCapAtStartIsTrimmedOldestFirst() {
    const auto r = root("restart");
    {
      ShardCache big(r, 1000);
      for (int i = 0; i < 3; ++i) stream(big, big.pathFor("PEER", kModel, i, i + 1), 100);
    }
    // Last use is the file time: make layer 1 the oldest, then layer 0.
    const auto now = fs::file_time_type::clock::now();
    fs::last_write_time(r / "PEER" / kModel / "1-2.gguf", now - std::chrono::hours(2));
    fs::last_write_time(r / "PEER" / kModel / "0-1.gguf", now - std::chrono::hours(1));
    ShardCache cache(r, 200);
    QVERIFY(!fs::exists(r / "PEER" / kModel / "1-2.gguf"));
    QVERIFY(fs::exists(r / "PEER" / kModel / "0-1.gguf"));
    QVERIFY(fs::exists(r / "PEER" / kModel / "2-3.gguf"));
    QCOMPARE(cache.usedBytes(), uint64_t{200});
  }

  void leftoversOfInterruptedStreamsAreRemovedAtStart() {
    const auto r = root("leftovers");
    writeFile(r / "PEER" / kModel / ".incoming-0-1-123-1" / "0.bin", 10);
    writeFile(r / "PEER" / kModel / "0-1.gguf.tmp-123", 10);
    writeFile(r / "PEER" / kModel / "1-2.gguf", 10);
    ShardCache cache(r, 1000);
    QVERIFY(!fs::exists(r / "PEER" / kModel / ".incoming-0-1-123-1"));
    QVERIFY(!fs::exists(r / "PEER" / kModel / "0-1.gguf.tmp-123"));
    QVERIFY(cache.contains(r / "PEER" / kModel / "1-2.gguf"));
    QCOMPARE(cache.usedBytes(), uint64_t{10});
  }

  void shardsAreFiledUnderTheCoordinatorThatStreamedThem() {
    ShardCache cache(root("owners"), 1000);
    QVERIFY(cache.pathFor("AAAA-BBBB", kModel, 0, 4) != cache.pathFor("CCCC-DDDD", kModel, 0, 4));
    QCOMPARE(cache.pathFor("AAAA-BBBB", kModel, 0, 4),
             root("owners") / "AAAA-BBBB" / kModel / "0-4.gguf");
  }

  void ownerThatIsNotADeviceIdNeverBecomesAPath() {
    ShardCache cache(root("hostile"), 1000);
    const auto p = cache.pathFor("../../etc", kModel, 0, 1);
    QCOMPARE(p.parent_path().parent_path().parent_path(), root("hostile"));
    QVERIFY(p.string().find("..") == std::string::npos);
  }

  void defaultCapIsAQuarterOfTheFreeDiskAtMost256GiB() {
    const uint64_t freeBytes = fs::space(fs::temp_directory_path()).available;
    const uint64_t cap = ShardCache::defaultMaxBytes(root("default"), 0);
    // Other processes write meanwhile: within 1 GiB of a quarter of what was free.
    const uint64_t want = std::min(kShardCacheDefaultMaxBytes, freeBytes / 4);
    const uint64_t slack = uint64_t{1} << 30;
    QVERIFY(cap <= kShardCacheDefaultMaxBytes);
    QVERIFY(cap + slack >= want && cap <= want + slack);
    // What the cache already holds counts as free, so the cap does not shrink as it fills.
    QVERIFY(ShardCache::defaultMaxBytes(root("default"), uint64_t{4} << 20) >= cap);
  }
};

QTEST_GUILESS_MAIN(TestShardCache)
#include "test_shard_cache.moc"
