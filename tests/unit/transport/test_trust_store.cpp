// trusted.json shared by several processes (a running node, shoal-cli, the app): concurrent
// changes merge instead of clobbering each other, a change saved by another process is seen at
// the next check, a file that is empty or does not parse is a clear error and is never
// overwritten, and the file is private to its owner.

#include <sys/stat.h>
#include <unistd.h>

#include <QTemporaryDir>
#include <QtTest>
#include <fstream>
#include <future>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "engine/error.h"
#include "lan/transport/identity.h"
#include "lan/transport/private_files.h"
#include "lan/transport/trust_store.h"

using namespace shoal::lan;

namespace {

// Changes each of two stores makes at once: enough for their read-modify-write windows to
// overlap many times, few enough to stay well under a second.
constexpr int kAddsPerStore = 25;

// How long a test waits for something that must not block before it calls it blocked (and lets
// go of what blocks it, so the test ends either way).
constexpr std::chrono::seconds kMustAnswerWithin{5};
// Long enough for a waiting change to still be waiting when kMustAnswerWithin has passed.
constexpr std::chrono::seconds kPatientLockWait{30};
// Time for a started change to reach its wait for the lock (it does not count on it: the test
// holds either way, it only tests less when the change is late).
constexpr std::chrono::milliseconds kLetItStartWaiting{100};

// The store's file lock. Another process (shoal-cli, the app) holding it is played by a lock of
// the test's own on it: each lock opens its own file description, so they conflict the same way.
std::filesystem::path lockFileOf(const std::filesystem::path& dir) {
  return dir / "trusted.json.lock";
}

std::filesystem::path dirOf(const QTemporaryDir& d) { return d.path().toStdString(); }

std::string fileText(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> freshIds(int n) {
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) ids.push_back(createIdentity().deviceId);
  return ids;
}

// The error load() throws for the file as it is now ("" when none).
std::string loadError(const std::filesystem::path& dir) {
  TrustStore store;
  try {
    store.load(dir);
  } catch (const shoal::Error& e) {
    return e.what();
  }
  return {};
}

}  // namespace

class TestTrustStore : public QObject {
  Q_OBJECT

 private slots:
  void concurrentAddsFromTwoStoresOnOneFileAllSurvive() {
    QTemporaryDir tmp;
    TrustStore a, b;
    a.load(dirOf(tmp));
    b.load(dirOf(tmp));
    const std::vector<std::string> idsA = freshIds(kAddsPerStore), idsB = freshIds(kAddsPerStore);
    std::thread ta([&] {
      for (const auto& id : idsA) a.add(id, "from a");
    });
    std::thread tb([&] {
      for (const auto& id : idsB) b.add(id, "from b");
    });
    ta.join();
    tb.join();
    TrustStore reread;
    reread.load(dirOf(tmp));
    QCOMPARE(reread.list().size(), size_t{2 * kAddsPerStore});
    for (const auto& id : idsA) QVERIFY(reread.isTrusted(id));
    for (const auto& id : idsB) QVERIFY(reread.isTrusted(id));
  }

  void aSaveKeepsWhatAnotherStoreSavedSinceItsLoad() {
    QTemporaryDir tmp;
    const std::vector<std::string> ids = freshIds(2);
    TrustStore node, cli;
    node.load(dirOf(tmp));
    cli.load(dirOf(tmp));
    cli.add(ids[0], "paired with the CLI");
    node.add(ids[1], "paired on the node");  // its cache predates the CLI's save
    TrustStore reread;
    reread.load(dirOf(tmp));
    QVERIFY(reread.isTrusted(ids[0]));
    QVERIFY(reread.isTrusted(ids[1]));
  }

  void aDeviceForgottenByAnotherStoreIsNoLongerTrusted() {
    QTemporaryDir tmp;
    const std::string id = createIdentity().deviceId;
    TrustStore node, cli;
    node.load(dirOf(tmp));
    node.add(id, "coordinator");
    cli.load(dirOf(tmp));
    QVERIFY(node.isTrusted(id));
    QVERIFY(cli.remove(id));
    QVERIFY(!node.isTrusted(id));
    QVERIFY(node.list().empty());
  }

  void refreshReportsAChangeOnDiskOnce() {
    QTemporaryDir tmp;
    const std::string id = createIdentity().deviceId;
    TrustStore node, cli;
    node.load(dirOf(tmp));
    cli.load(dirOf(tmp));
    QVERIFY(!node.refresh());
    cli.add(id, "x");
    QVERIFY(node.refresh());
    QVERIFY(!node.refresh());
  }

  void anEmptyTrustFileIsAClearError() {
    QTemporaryDir tmp;
    std::ofstream(dirOf(tmp) / "trusted.json").flush();
    const std::string e = loadError(dirOf(tmp));
    QVERIFY2(e.find("trusted.json") != std::string::npos, e.c_str());
    QVERIFY2(e.find("is empty") != std::string::npos, e.c_str());
    QVERIFY2(e.find("delete it") != std::string::npos, e.c_str());  // what to do
    QVERIFY2(e.find('\n') == std::string::npos, e.c_str());         // one line
  }

  void aCorruptTrustFileIsAClearError() {
    QTemporaryDir tmp;
    // Cut off in the middle of an entry. (A plain literal: moc misreads unbalanced raw strings.)
    std::ofstream(dirOf(tmp) / "trusted.json") << "{\"devices\":[{\"id\":\"MFZWI3D-";
    const std::string e = loadError(dirOf(tmp));
    QVERIFY2(e.find("trusted.json") != std::string::npos, e.c_str());
    QVERIFY2(e.find("not valid JSON") != std::string::npos, e.c_str());
  }

  void aChangeIsRefusedAndTheFileKeptWhenItNoLongerParses() {
    QTemporaryDir tmp;
    const auto file = dirOf(tmp) / "trusted.json";
    TrustStore store;
    store.load(dirOf(tmp));
    store.add(createIdentity().deviceId, "old");
    // Emptied behind our back (an editor, a crash of an older version): never saved over.
    std::ofstream(file, std::ios::trunc).flush();
    QVERIFY_THROWS_EXCEPTION(shoal::Error, store.add(createIdentity().deviceId, "new"));
    QCOMPARE(std::filesystem::file_size(file), uintmax_t{0});
    const std::string garbage = "{\"devices\": [ half";
    std::ofstream(file, std::ios::trunc) << garbage;
    QVERIFY_THROWS_EXCEPTION(shoal::Error, store.add(createIdentity().deviceId, "new"));
    QCOMPARE(fileText(file), garbage);
  }

  void aStoreTrustsNobodyWhileItsFileDoesNotParse() {
    QTemporaryDir tmp;
    const auto file = dirOf(tmp) / "trusted.json";
    const std::string id = createIdentity().deviceId;
    TrustStore store;
    store.load(dirOf(tmp));
    store.add(id, "coordinator");
    std::ofstream(file, std::ios::trunc) << "{ not json";
    QVERIFY(!store.isTrusted(id));
    QVERIFY_THROWS_EXCEPTION(shoal::Error, TrustStore().load(dirOf(tmp)));
    // Fixed again: trusted again.
    TrustStore writer;
    std::filesystem::remove(file);
    writer.load(dirOf(tmp));
    writer.add(id, "coordinator");
    QVERIFY(store.isTrusted(id));
  }

  void theTrustFileIsReadableByItsOwnerOnly() {
    QTemporaryDir tmp;
    TrustStore store;
    store.load(dirOf(tmp));
    store.add(createIdentity().deviceId, "x");
    struct stat st {};
    QCOMPARE(::stat((dirOf(tmp) / "trusted.json").c_str(), &st), 0);
    QCOMPARE(st.st_mode & 0777, 0600u);
  }

  void aWorldReadableTrustFileOfAnOlderVersionIsTightenedOnLoad() {
    QTemporaryDir tmp;
    const auto file = dirOf(tmp) / "trusted.json";
    std::ofstream(file) << R"({"devices":[]})";
    ::chmod(file.c_str(), 0644);
    TrustStore store;
    store.load(dirOf(tmp));
    struct stat st {};
    QCOMPARE(::stat(file.c_str(), &st), 0);
    QCOMPARE(st.st_mode & 0777, 0600u);
  }

  void aSaveLeavesOnlyTheFileAndItsLock() {
    QTemporaryDir tmp;
    TrustStore store;
    store.load(dirOf(tmp));
    store.add(createIdentity().deviceId, "x");
    QVERIFY(store.remove(store.list().front().deviceId));
    std::set<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dirOf(tmp)))
      names.insert(e.path().filename().string());
    QCOMPARE(names, (std::set<std::string>{"trusted.json", "trusted.json.lock"}));
  }

  void filesRootWritesInAServicesDirectoryStayTheServices() {
    // `sudo shoal-cli pool forget --config-dir /var/lib/shoal ...`: the service (user shoal)
    // must still be able to read and lock its trust list afterwards.
    if (::geteuid() != 0) QSKIP("needs root (chown)");
    QTemporaryDir tmp;
    constexpr uid_t kServiceUid = 4242;
    constexpr gid_t kServiceGid = 4243;
    QCOMPARE(::chown(dirOf(tmp).c_str(), kServiceUid, kServiceGid), 0);
    TrustStore store;
    store.load(dirOf(tmp));
    store.add(createIdentity().deviceId, "x");
    for (const char* name : {"trusted.json", "trusted.json.lock"}) {
      struct stat st {};
      QCOMPARE(::stat((dirOf(tmp) / name).c_str(), &st), 0);
      QCOMPARE(st.st_uid, kServiceUid);
      QCOMPARE(st.st_gid, kServiceGid);
    }
  }

  void aQueryAnswersWhileAChangeWaitsForAnotherProcessesFileLock() {
    // A node pairing (its store's add) while shoal-cli holds the lock: the listener's and the
    // revocation check's isTrusted on that same store must not wait for shoal-cli.
    QTemporaryDir tmp;
    TrustStore store;
    store.load(dirOf(tmp));
    const std::string known = createIdentity().deviceId, pairing = createIdentity().deviceId;
    store.add(known, "known");
    store.setLockWait(kPatientLockWait);
    std::optional<ExclusiveLock> held;
    held.emplace(lockFileOf(dirOf(tmp)));
    auto change = std::async(std::launch::async, [&] { store.add(pairing, "pairing"); });
    std::this_thread::sleep_for(kLetItStartWaiting);
    auto query = std::async(std::launch::async, [&] { return store.isTrusted(known); });
    const bool answeredWhileHeld = query.wait_for(kMustAnswerWithin) == std::future_status::ready;
    held.reset();
    change.get();
    QVERIFY(answeredWhileHeld);
    QVERIFY(query.get());
    QVERIFY(store.isTrusted(pairing));
  }

  void aChangeGivesUpWithAClearErrorWhenTheLockIsHeldTooLong() {
    QTemporaryDir tmp;
    TrustStore store;
    store.load(dirOf(tmp));
    store.setLockWait(std::chrono::milliseconds(200));
    std::optional<ExclusiveLock> held;
    held.emplace(lockFileOf(dirOf(tmp)));
    const std::string id = createIdentity().deviceId;
    auto change = std::async(std::launch::async, [&]() -> std::string {
      try {
        store.add(id, "x");
      } catch (const shoal::Error& e) {
        return e.what();
      }
      return {};
    });
    const bool gaveUpWhileHeld = change.wait_for(kMustAnswerWithin) == std::future_status::ready;
    held.reset();
    const std::string error = change.get();
    QVERIFY(gaveUpWhileHeld);
    QVERIFY2(error.find("trusted.json.lock") != std::string::npos, error.c_str());
    QVERIFY2(error.find("200 ms") != std::string::npos, error.c_str());
    QVERIFY(!store.isTrusted(id));
  }

  void aMissingConfigDirectoryIsCreatedPrivate() {
    QTemporaryDir tmp;
    const auto dir = dirOf(tmp) / "new-config";
    TrustStore store;
    store.load(dir);
    store.add(createIdentity().deviceId, "x");
    struct stat st {};
    QCOMPARE(::stat(dir.c_str(), &st), 0);
    QCOMPARE(st.st_mode & 0777, 0700u);
  }
};

QTEST_APPLESS_MAIN(TestTrustStore)
#include "test_trust_store.moc"
