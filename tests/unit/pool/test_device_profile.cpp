// Measured device profiles: the CPU probes give positive figures, the config dir caches them by
// key (CPU model + threads) so a later start does not measure, --reprofile and a damaged cache
// measure again, and the figures a node reports reach the planner instead of the fallbacks.

#include <QtTest>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "kernels/cpu/cpu_backend.h"
#include "lan/node/device_profile.h"
#include "lan/node/node_host.h"
#include "lan/pool/node_client.h"
#include "lan/pool/pool_builder.h"
#include "tests/integration/lan_node/memory_connection.h"

using namespace shoal;
using namespace shoal::lan;

class TestDeviceProfile : public QObject {
  Q_OBJECT

  std::filesystem::path m_dir;
  int m_measured = 0;

  // A measurement that counts its calls and returns figures no real probe would give.
  std::function<DeviceProfile()> fake(double bandwidth, double flops) {
    return [this, bandwidth, flops] {
      ++m_measured;
      return DeviceProfile{bandwidth, flops};
    };
  }

  std::filesystem::path fresh(const std::string& name) {
    const auto d = m_dir / name;
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    m_measured = 0;
    return d;
  }

 private slots:
  void initTestCase() {
    m_dir = std::filesystem::temp_directory_path() /
            ("shoal-device-profile-" + std::to_string(QCoreApplication::applicationPid()));
  }
  void cleanupTestCase() { std::filesystem::remove_all(m_dir); }

  void cpuProbesGivePositiveFigures() {
    const auto t0 = std::chrono::steady_clock::now();
    const DeviceProfile p = measureCpuProfile(1);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    qInfo("1 thread: %.2f GB/s decode read, %.2f GFLOP/s Q4_0 matmul, probes took %.3f s",
          p.bandwidthBytesPerS / 1e9, p.flopsPerS / 1e9, s);
    QVERIFY(p.bandwidthBytesPerS > 0);
    QVERIFY(p.flopsPerS > 0);
  }

  void aCachedProfileIsNotMeasuredAgain() {
    const auto dir = fresh("cached");
    const DeviceProfile first = cachedProfile(dir, "cpu: X (2 threads)", false, fake(1e10, 2e10));
    const DeviceProfile second = cachedProfile(dir, "cpu: X (2 threads)", false, fake(7, 7));
    QCOMPARE(m_measured, 1);
    QCOMPARE(first.bandwidthBytesPerS, 1e10);
    QCOMPARE(second.bandwidthBytesPerS, 1e10);
    QCOMPARE(second.flopsPerS, 2e10);
    QVERIFY(std::filesystem::exists(dir / kDeviceProfilesFile));
  }

  void anotherKeyIsMeasuredAndTheFirstIsKept() {
    const auto dir = fresh("keys");
    cachedProfile(dir, "cpu: X (2 threads)", false, fake(1e10, 2e10));
    const DeviceProfile other = cachedProfile(dir, "cpu: X (1 threads)", false, fake(5e9, 1e10));
    QCOMPARE(m_measured, 2);
    QCOMPARE(other.bandwidthBytesPerS, 5e9);
    const DeviceProfile again = cachedProfile(dir, "cpu: X (2 threads)", false, fake(7, 7));
    QCOMPARE(m_measured, 2);
    QCOMPARE(again.flopsPerS, 2e10);
  }

  void reprofileMeasuresAgainAndReplacesTheCache() {
    const auto dir = fresh("reprofile");
    cachedProfile(dir, "k", false, fake(1e10, 2e10));
    const DeviceProfile re = cachedProfile(dir, "k", true, fake(3e10, 4e10));
    QCOMPARE(m_measured, 2);
    QCOMPARE(re.bandwidthBytesPerS, 3e10);
    QCOMPARE(cachedProfile(dir, "k", false, fake(7, 7)).flopsPerS, 4e10);
    QCOMPARE(m_measured, 2);
  }

  void aDamagedCacheIsMeasuredAgain_data() {
    QTest::addColumn<QByteArray>("content");
    QTest::newRow("not json") << QByteArray("{not json");
    QTest::newRow("not an object") << QByteArray("[1, 2]");
    QTest::newRow("zero figures") << QByteArray(R"({"k": {"bandwidth_bytes_per_s": 0,
                                                          "flops_per_s": 1e9, "probe": 2}})");
    // Good figures from before the decode probe: their bandwidth overstates decoding.
    QTest::newRow("older probes") << QByteArray(R"({"k": {"bandwidth_bytes_per_s": 3e10,
                                                          "flops_per_s": 1e11}})");
    QTest::newRow("negative figures") << QByteArray(R"({"k": {"bandwidth_bytes_per_s": -1,
                                                              "flops_per_s": -1, "probe": 2}})");
    QTest::newRow("strings") << QByteArray(R"({"k": {"bandwidth_bytes_per_s": "fast",
                                                     "flops_per_s": "faster"}})");
  }

  void aDamagedCacheIsMeasuredAgain() {
    QFETCH(QByteArray, content);
    const auto dir = fresh("damaged");
    std::ofstream(dir / kDeviceProfilesFile) << content.toStdString();
    const DeviceProfile p = cachedProfile(dir, "k", false, fake(1e10, 2e10));
    QCOMPARE(m_measured, 1);
    QCOMPARE(p.bandwidthBytesPerS, 1e10);
    QCOMPARE(cachedProfile(dir, "k", false, fake(7, 7)).flopsPerS, 2e10);
    QCOMPARE(m_measured, 1);
  }

  void theReportedProfileReachesThePlanner() {
    const auto dir = fresh("host");
    const DeviceProfile measured{3.5e10, 6.5e10};
    std::vector<std::unique_ptr<runtime::Backend>> backends;
    backends.push_back(std::make_unique<cpu::CpuBackend>(1));
    NodeHostOptions o;
    o.name = "alpha";
    o.deviceId = "ID-alpha";
    o.configDir = dir;
    o.profiles["cpu0"] = measured;
    NodeHost host(o, std::move(backends), nullptr);
    auto [client, server] = test::memoryConnectionPair("ID-alpha");
    std::atomic<bool> stop{false};
    std::thread serving([&, server = server] { host.serve(*server, stop); });
    NodeClient nodeClient(client, std::chrono::seconds(30));
    const NodeInfo info = nodeClient.info();
    nodeClient.close();
    stop = true;
    serving.join();

    const plan::Pool pool = buildPool({info}, {});
    QCOMPARE(pool.devices.size(), size_t(1));
    QCOMPARE(pool.devices[0].bandwidthBytesPerS, measured.bandwidthBytesPerS);
    QCOMPARE(pool.devices[0].flopsPerS, measured.flopsPerS);
    QVERIFY(pool.devices[0].bandwidthBytesPerS != kFallbackBandwidthBytesPerS);
    QVERIFY(pool.devices[0].flopsPerS != kFallbackFlopsPerS);
  }
};

QTEST_GUILESS_MAIN(TestDeviceProfile)
#include "test_device_profile.moc"
