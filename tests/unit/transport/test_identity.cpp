// Identities and the trust store: what is created on disk (and with which permissions), how a
// device ID reads and catches typos, and that trust survives a restart.

#include <sys/stat.h>

#include <QTemporaryDir>
#include <QtTest>
#include <fstream>

#include "engine/error.h"
#include "lan/transport/identity.h"
#include "lan/transport/trust_store.h"

using namespace shoal::lan;

namespace {

std::filesystem::path dirOf(const QTemporaryDir& d) { return d.path().toStdString(); }

}  // namespace

class TestIdentity : public QObject {
  Q_OBJECT

 private slots:
  void aNewIdentityIsWrittenWithAPrivateKeyFile() {
    QTemporaryDir tmp;
    const Identity id = loadOrCreateIdentity(dirOf(tmp));
    const auto key = dirOf(tmp) / "identity" / "key.pem";
    QVERIFY(std::filesystem::exists(dirOf(tmp) / "identity" / "cert.pem"));
    struct stat st {};
    QCOMPARE(::stat(key.c_str(), &st), 0);
    QCOMPARE(st.st_mode & 0777, 0600u);
    QVERIFY(id.certPem.find("BEGIN CERTIFICATE") != std::string::npos);
    QVERIFY(id.keyPem.find("PRIVATE KEY") != std::string::npos);
  }

  void loadingAgainGivesTheSameDeviceId() {
    QTemporaryDir tmp;
    const Identity a = loadOrCreateIdentity(dirOf(tmp));
    const Identity b = loadOrCreateIdentity(dirOf(tmp));
    QCOMPARE(a.deviceId, b.deviceId);
    QCOMPARE(a.certPem, b.certPem);
  }

  void twoIdentitiesHaveDifferentDeviceIds() {
    QVERIFY(createIdentity().deviceId != createIdentity().deviceId);
  }

  void aMissingKeyIsAnErrorNotANewIdentity() {
    QTemporaryDir tmp;
    loadOrCreateIdentity(dirOf(tmp));
    std::filesystem::remove(dirOf(tmp) / "identity" / "key.pem");
    QVERIFY_THROWS_EXCEPTION(shoal::Error, loadOrCreateIdentity(dirOf(tmp)));
  }

  void aKeyOfAnotherCertificateIsRefused() {
    QTemporaryDir tmp;
    loadOrCreateIdentity(dirOf(tmp));
    std::ofstream(dirOf(tmp) / "identity" / "key.pem") << createIdentity().keyPem;
    QVERIFY_THROWS_EXCEPTION(shoal::Error, loadOrCreateIdentity(dirOf(tmp)));
  }

  void deviceIdIsEightGroupsOfSevenBase32() {
    const std::string id = createIdentity().deviceId;
    QCOMPARE(id.size(), size_t{63});
    for (size_t i = 0; i < id.size(); ++i) {
      if (i % 8 == 7)
        QCOMPARE(id[i], '-');
      else
        QVERIFY(std::string("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567").find(id[i]) != std::string::npos);
    }
  }

  void deviceIdIsTheSha256OfTheCertificate() {
    const std::vector<uint8_t> digest(32, 0xab);
    const std::string id = formatDeviceId(digest);
    QCOMPARE(deviceIdDigest(id), digest);
  }

  void normalizingAcceptsLowerCaseWithoutDashes() {
    const std::string id = createIdentity().deviceId;
    std::string sloppy;
    for (char c : id)
      if (c != '-') sloppy += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    QCOMPARE(normalizeDeviceId(sloppy), id);
  }

  void aTypoInADeviceIdIsCaughtByItsCheckCharacter() {
    std::string id = createIdentity().deviceId;
    id[2] = id[2] == 'A' ? 'B' : 'A';
    QVERIFY_THROWS_EXCEPTION(shoal::Error, normalizeDeviceId(id));
  }

  void trustPersistsAcrossLoads() {
    QTemporaryDir tmp;
    const std::string a = createIdentity().deviceId, b = createIdentity().deviceId;
    {
      TrustStore store;
      store.load(dirOf(tmp));
      store.add(a, "alpha");
      store.add(b, "beta");
      QVERIFY(store.remove(b));
    }
    TrustStore again;
    again.load(dirOf(tmp));
    QVERIFY(again.isTrusted(a));
    QVERIFY(!again.isTrusted(b));
    QCOMPARE(again.nameOf(a).value_or(""), std::string("alpha"));
    QCOMPARE(again.list().size(), size_t{1});
  }

  void anEmptyStoreTrustsNobodyAndNotGarbage() {
    TrustStore store;
    QVERIFY(!store.isTrusted(createIdentity().deviceId));
    QVERIFY(!store.isTrusted("not an id"));
  }

  void addingAMalformedIdThrows() {
    TrustStore store;
    QVERIFY_THROWS_EXCEPTION(shoal::Error, store.add("ABC", "x"));
  }

  void aMalformedTrustFileIsAnErrorNamingTheFile() {
    QTemporaryDir tmp;
    std::ofstream(dirOf(tmp) / "trusted.json") << R"({"devices":[{"id":"nope"}]})";
    TrustStore store;
    try {
      store.load(dirOf(tmp));
      QFAIL("no error");
    } catch (const shoal::Error& e) {
      QVERIFY2(std::string(e.what()).find("trusted.json") != std::string::npos, e.what());
    }
  }
};

QTEST_APPLESS_MAIN(TestIdentity)
#include "test_identity.moc"
