#pragma once
// A made-up pool of three machines that changes every half second, like the coordinator's
// telemetry: for tests of the pool page and for screenshots until a live pool feeds it. Every
// snapshot it makes is plainly fake (deterministic waves, fixed names).

#include <QObject>
#include <QTimer>

#include "app/gui/pool_types.h"
#include "lan/pool/telemetry.h"

namespace shoal::gui {

class FakePoolFeed : public QObject {
  Q_OBJECT

 public:
  explicit FakePoolFeed(QObject* parent = nullptr);

  void start(int intervalMs = 500);
  void stop();
  // The snapshot of tick `tick` (what the timer emits as its tick-th snapshot).
  static lan::PoolSnapshot snapshotAt(int tick, qint64 unixMs);

 signals:
  void snapshot(const shoal::lan::PoolSnapshot& snapshot);

 private:
  QTimer m_timer;
  int m_tick = 0;
};

}  // namespace shoal::gui
