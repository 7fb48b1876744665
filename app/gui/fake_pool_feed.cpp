#include "app/gui/fake_pool_feed.h"

#include <QDateTime>
#include <cmath>

#include "app/gui/pool_view.h"

namespace shoal::gui {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

}  // namespace

FakePoolFeed::FakePoolFeed(QObject* parent) : QObject(parent) {
  qRegisterMetaType<lan::PoolSnapshot>();
  connect(&m_timer, &QTimer::timeout, this,
          [this] { emit snapshot(snapshotAt(m_tick++, QDateTime::currentMSecsSinceEpoch())); });
}

void FakePoolFeed::start(int intervalMs) {
  m_timer.start(intervalMs);
  emit snapshot(snapshotAt(m_tick++, QDateTime::currentMSecsSinceEpoch()));
}

void FakePoolFeed::stop() { m_timer.stop(); }

lan::PoolSnapshot FakePoolFeed::snapshotAt(int tick, qint64 unixMs) {
  const double t = tick * 0.5;
  const auto wave = [t](double phase, double lo, double hi) {
    return lo + (hi - lo) * (0.5 + 0.5 * std::sin(t * 0.4 + phase));
  };
  lan::PoolSnapshot s;
  s.unixMs = unixMs;
  s.modelName = "Llama-3.1-8B-Instruct Q4_K_M";
  s.modelLayers = 32;
  s.predictedTokensPerS = 38.5;
  const double rate = wave(0.0, 30, 40);
  s.devices.push_back({"node-a", "studio", "cuda0", "NVIDIA GeForce RTX 4070 (12 GiB)", "cuda",
                       wave(0.0, 0.55, 0.8), 7 * kGiB, 12 * kGiB, rate, 0, 0, 18});
  s.devices.push_back({"node-b", "laptop", "vulkan0", "AMD Radeon 780M", "vulkan",
                       wave(1.0, 0.65, 0.9), 3 * kGiB, 8 * kGiB, rate, 0, 18, 28});
  s.devices.push_back({"node-c", "nas", "cpu0", "Intel Core i5-12400 (6 threads)", "cpu",
                       wave(2.0, 0.4, 0.7), 2 * kGiB, 32 * kGiB, rate, 1, 28, 32});
  s.links.push_back({"node-a", "node-b", wave(0.5, 0.8, 1.6), 110e6, true});
  s.links.push_back({"node-b", "node-c", wave(1.5, 1.1, 2.4), 95e6, false});
  return s;
}

}  // namespace shoal::gui
