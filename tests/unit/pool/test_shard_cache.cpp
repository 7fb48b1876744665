// The node's shard cache (lan/node/shard_cache.h) on small files: a total cap with
// least-recently-used eviction that never removes a shard in use, streams over the cap written
// while the disk has room and evicted once unused, shards filed under the coordinator that
// streamed them, and what an interrupted stream left removed at start.

#include <QtTest>
#include <filesystem>
#include <fstream>
#include <optional>

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
    { ShardCache::Pin other = stream(cache, cache.pathFor("PEER", kModel, 1, 2), 100); }
    QVERIFY(fs::exists(a));
  }

  // Issue 14 review: the streamed shard is the file its stage runs from, so the cap must not
  // refuse the stage; the disk bounds it instead.
  void streamLargerThanTheCapIsWrittenWhileTheDiskHasRoom() {
    ShardCache cache(root("over-cap"), 250);
    if (ShardCache::diskRoomBytes(root("over-cap")) < 10000) QSKIP("the disk is nearly full");
    const auto a = cache.pathFor("PEER", kModel, 0, 1);
    ShardCache::Pin held = stream(cache, a, 400);
    QVERIFY(fs::exists(a));
    QCOMPARE(cache.usedBytes(), uint64_t{400});
  }

  void shardOverTheCapIsEvictedOnceNoStageUsesIt() {
    ShardCache cache(root("over-cap-unused"), 250);
    if (ShardCache::diskRoomBytes(root("over-cap-unused")) < 10000) {
      QSKIP("the disk is nearly full");
    }
    const auto a = cache.pathFor("PEER", kModel, 0, 1);
    std::optional<ShardCache::Pin> held = stream(cache, a, 400);
    QVERIFY(fs::exists(a));
    held.reset();
    QVERIFY(!fs::exists(a));
    QVERIFY(!cache.contains(a));
    QCOMPARE(cache.usedBytes(), uint64_t{0});
  }

  void streamLargerThanTheFreeDiskIsRefusedWithoutEvictingAnything() {
    ShardCache cache(root("too-big"), 250);
    const auto a = cache.pathFor("PEER", kModel, 0, 1);
    { stream(cache, a, 200); }
    auto reservation = cache.reserve();
    const uint64_t room = ShardCache::diskRoomBytes(root("too-big"));
    try {
      reservation->grow(room + 1000);
      QFAIL("a stream larger than the free disk was accepted");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("disk") != std::string::npos, e.what());
    }
    QVERIFY(fs::exists(a));
    QCOMPARE(cache.usedBytes(), uint64_t{200});
  }

  void diskRoomKeepsAMarginOfTheDiskFree() {
    const fs::space_info space = fs::space(fs::temp_directory_path());
    const uint64_t room = ShardCache::diskRoomBytes(root("margin"));
    const uint64_t margin = std::max(kShardCacheDiskMarginMinBytes, uint64_t(space.capacity) / 20);
    // Other processes write meanwhile: within 1 GiB.
    const uint64_t want = space.available > margin ? space.available - margin : 0;
    const uint64_t slack = uint64_t{1} << 30;
    QVERIFY(room + slack >= want && room <= want + slack);
    QVERIFY(room + kShardCacheDiskMarginMinBytes <= uint64_t(space.available) + slack);
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

  // node_info.shards: a coordinator learns its own cached ranges, never another one's.
  void shardsOfListsOneOwnersRanges() {
    ShardCache cache(root("listing"), 1000);
    { stream(cache, cache.pathFor("AAAA-BBBB", kModel, 0, 4), 10); }
    { stream(cache, cache.pathFor("AAAA-BBBB", kModel, 4, 9), 10); }
    { stream(cache, cache.pathFor("CCCC-DDDD", kModel, 9, 12), 10); }
    const auto mine = cache.shardsOf("AAAA-BBBB", 10);
    QCOMPARE(mine.size(), size_t(2));
    QCOMPARE(mine[0].sha256, std::string(kModel));
    QCOMPARE(mine[0].firstLayer + mine[1].firstLayer, 4);
    QCOMPARE(mine[0].lastLayer + mine[1].lastLayer, 13);
    QCOMPARE(cache.shardsOf("CCCC-DDDD", 10).size(), size_t(1));
    QCOMPARE(cache.shardsOf("AAAA-BBBB", 1).size(), size_t(1));  // capped
    QVERIFY(cache.shardsOf("EEEE-FFFF", 10).empty());
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
