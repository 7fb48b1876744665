// The identity on disk: created whole or not at all (never a key without its certificate), a
// half-written identity of an older version or a lost file refused with one clear line, files
// and directories private to their owner, and one identity when several processes create it at
// once.

#include <sys/stat.h>

#include <QTemporaryDir>
#include <QtTest>
#include <fstream>
#include <set>
#include <thread>

#include "engine/error.h"
#include "lan/transport/identity.h"

using namespace shoal::lan;

namespace {

// Threads racing to create one identity: enough to make the rename race likely.
constexpr int kRacingCreators = 8;

std::filesystem::path dirOf(const QTemporaryDir& d) { return d.path().toStdString(); }

mode_t modeOf(const std::filesystem::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return 0;
  return st.st_mode & 0777;
}

std::string loadError(const std::filesystem::path& configDir) {
  try {
    loadOrCreateIdentity(configDir);
  } catch (const shoal::Error& e) {
    return e.what();
  }
  return {};
}

std::set<std::string> namesIn(const std::filesystem::path& dir) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    names.insert(e.path().filename().string());
  return names;
}

}  // namespace

class TestIdentityFiles : public QObject {
  Q_OBJECT

 private slots:
  void aKeyWithoutItsCertificateIsOneClearLineNamingBothFiles() {
    // What an older version left when it crashed between writing key.pem and cert.pem.
    QTemporaryDir tmp;
    const auto dir = dirOf(tmp) / "identity";
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "key.pem") << createIdentity().keyPem;
    std::ofstream(dir / "cert.pem.tmp") << "-----BEGIN CERT";
    const std::string e = loadError(dirOf(tmp));
    QVERIFY2(e.find((dir / "key.pem").string()) != std::string::npos, e.c_str());
    QVERIFY2(e.find((dir / "cert.pem").string() + " does not") != std::string::npos, e.c_str());
    QVERIFY2(e.find("move " + dir.string() + " away") != std::string::npos, e.c_str());
    QVERIFY2(e.find('\n') == std::string::npos, e.c_str());
    // Nothing was replaced: the key is still there and no certificate was made up.
    QVERIFY(std::filesystem::exists(dir / "key.pem"));
    QVERIFY(!std::filesystem::exists(dir / "cert.pem"));
  }

  void aCertificateWithoutItsKeyIsRefusedTheSameWay() {
    QTemporaryDir tmp;
    const auto dir = dirOf(tmp) / "identity";
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "cert.pem") << createIdentity().certPem;
    const std::string e = loadError(dirOf(tmp));
    QVERIFY2(e.find((dir / "key.pem").string() + " does not") != std::string::npos, e.c_str());
  }

  void anEmptyKeyFileIsAClearError() {
    QTemporaryDir tmp;
    loadOrCreateIdentity(dirOf(tmp));
    std::ofstream(dirOf(tmp) / "identity" / "key.pem", std::ios::trunc).flush();
    const std::string e = loadError(dirOf(tmp));
    QVERIFY2(e.find("key.pem is empty") != std::string::npos, e.c_str());
  }

  void leftoversOfAnInterruptedWriteDoNotBlockANewIdentity() {
    QTemporaryDir tmp;
    const auto dir = dirOf(tmp) / "identity";
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "key.pem.tmp") << "-----BEGIN PRI";
    const Identity id = loadOrCreateIdentity(dirOf(tmp));
    QCOMPARE(namesIn(dir), (std::set<std::string>{"cert.pem", "key.pem"}));
    QCOMPARE(loadOrCreateIdentity(dirOf(tmp)).deviceId, id.deviceId);
  }

  void whatACrashedCreatorLeftBesideTheIdentityIsCleared() {
    QTemporaryDir tmp;
    const auto stray = dirOf(tmp) / "identity.new.999.0";
    std::filesystem::create_directories(stray);
    std::ofstream(stray / "key.pem") << createIdentity().keyPem;  // cert.pem never written
    loadOrCreateIdentity(dirOf(tmp));
    QCOMPARE(namesIn(dirOf(tmp)), (std::set<std::string>{"identity"}));
  }

  void aNewIdentityLeavesNoTemporaryDirectory() {
    QTemporaryDir tmp;
    loadOrCreateIdentity(dirOf(tmp));
    QCOMPARE(namesIn(dirOf(tmp)), (std::set<std::string>{"identity"}));
  }

  void theIdentityDirectoryAndKeyArePrivate() {
    QTemporaryDir tmp;
    const auto config = dirOf(tmp) / "config";  // created here
    loadOrCreateIdentity(config);
    QCOMPARE(modeOf(config), 0700u);
    QCOMPARE(modeOf(config / "identity"), 0700u);
    QCOMPARE(modeOf(config / "identity" / "key.pem"), 0600u);
  }

  void anIdentityOfAnOlderVersionIsTightenedOnLoad() {
    QTemporaryDir tmp;
    loadOrCreateIdentity(dirOf(tmp));
    const auto dir = dirOf(tmp) / "identity";
    ::chmod(dir.c_str(), 0755);
    ::chmod((dir / "key.pem").c_str(), 0644);
    loadOrCreateIdentity(dirOf(tmp));
    QCOMPARE(modeOf(dir), 0700u);
    QCOMPARE(modeOf(dir / "key.pem"), 0600u);
  }

  void creatorsRacingOnOneDirectoryAllGetTheSameIdentity() {
    QTemporaryDir tmp;
    std::vector<std::string> ids(kRacingCreators);
    std::vector<std::string> errors(kRacingCreators);
    std::vector<std::thread> threads;
    for (int i = 0; i < kRacingCreators; ++i) {
      threads.emplace_back([&, i] {
        try {
          ids[size_t(i)] = loadOrCreateIdentity(dirOf(tmp)).deviceId;
        } catch (const std::exception& e) {
          errors[size_t(i)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < kRacingCreators; ++i) {
      QVERIFY2(errors[size_t(i)].empty(), errors[size_t(i)].c_str());
      QCOMPARE(ids[size_t(i)], ids[0]);
    }
    QCOMPARE(loadOrCreateIdentity(dirOf(tmp)).deviceId, ids[0]);
    QCOMPARE(namesIn(dirOf(tmp)), (std::set<std::string>{"identity"}));
  }
};

QTEST_APPLESS_MAIN(TestIdentityFiles)
#include "test_identity_files.moc"
