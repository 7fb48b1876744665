// The "Devices & pool" page fed by a fake telemetry feed: a card per pooled device, chart series
// that gain points and keep only the last 60 s, a pipeline diagram with each device's layer range
// and the links' RTTs, the plan's predicted speed, and this machine's devices with the reason an
// unavailable backend cannot be used.

#include <QChart>
#include <QLegend>
#include <QLineSeries>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include "app/gui/chat_window.h"
#include "app/gui/device_card.h"
#include "app/gui/device_list.h"
#include "app/gui/fake_pool_feed.h"
#include "app/gui/pipeline_diagram.h"
#include "app/gui/pool_view.h"

using namespace shoal::gui;

class TestPoolView : public QObject {
  Q_OBJECT

 private slots:
  void aFakeFeedFillsCardsChartsAndTheDiagram() {
    PoolView view;
    view.resize(1200, 700);
    view.show();
    FakePoolFeed feed;
    QSignalSpy spy(&feed, &FakePoolFeed::snapshot);
    connect(&feed, &FakePoolFeed::snapshot, &view, &PoolView::setSnapshot, Qt::QueuedConnection);
    feed.start(10);
    QTRY_VERIFY(spy.count() >= 6);
    feed.stop();
    // Snapshots queued before stop() may still be pending: deliver them before comparing.
    QCoreApplication::sendPostedEvents();
    QTRY_VERIFY(!view.cards().isEmpty() && view.cards().front()->utilizationSeries()->count() >= 6);

    const shoal::lan::PoolSnapshot s = spy.last().at(0).value<shoal::lan::PoolSnapshot>();
    QCOMPARE(view.cards().size(), static_cast<int>(s.devices.size()));
    for (int i = 0; i < view.cards().size(); ++i) {
      DeviceCard* card = view.cards()[i];
      QVERIFY(card->utilizationSeries()->count() >= 6);
      QCOMPARE(card->tokensSeries()->count(), card->utilizationSeries()->count());
      const auto& d = s.devices[static_cast<size_t>(i)];  // the fake feed lists stage order
      QCOMPARE(card->utilizationSeries()->points().last().y(), d.busyFraction * 100.0);
      QVERIFY2(card->layerText().contains(QString::number(d.firstLayer)),
               qPrintable(card->layerText()));
    }

    const QList<PipelineDiagram::Segment>& segs = view.diagram()->segments();
    QCOMPARE(segs.size(), static_cast<int>(s.devices.size()));
    for (int i = 0; i < segs.size(); ++i) {
      QCOMPARE(segs[i].firstLayer, s.devices[static_cast<size_t>(i)].firstLayer);
      QCOMPARE(segs[i].lastLayer, s.devices[static_cast<size_t>(i)].lastLayer);
    }
    QCOMPARE(segs.last().lastLayer, s.modelLayers);
    QCOMPARE(view.diagram()->linkLabels().size(), static_cast<int>(s.links.size()));
    QVERIFY(s.links[0].direct && !s.links[1].direct);  // the fake feed has one of each
    QCOMPARE(view.diagram()->linkLabels()[0], QString("direct"));
    QCOMPARE(view.diagram()->linkLabels()[1],
             QString("%1 ms via here").arg(s.links[1].rttMs, 0, 'f', 1));
    QVERIFY2(view.planText().contains(
                 QString("predicted %1 tokens/s").arg(s.predictedTokensPerS, 0, 'f', 1)),
             qPrintable(view.planText()));
  }

  void aDeviceThatLeavesThePoolLosesItsCard() {
    PoolView view;
    shoal::lan::PoolSnapshot s = FakePoolFeed::snapshotAt(0, 1000);
    view.setSnapshot(s);
    QCOMPARE(view.cards().size(), 3);
    s.devices.pop_back();
    s.devices.back().lastLayer = s.modelLayers;
    s.links.pop_back();
    view.setSnapshot(s);
    QCOMPARE(view.cards().size(), 2);
    QCOMPARE(view.diagram()->segments().size(), 2);
    QCOMPARE(view.diagram()->linkLabels().size(), 1);
  }

  void chartsKeepTheLastSixtySeconds() {
    PoolView view;
    for (int tick = 0; tick < 240; ++tick) {
      view.setSnapshot(FakePoolFeed::snapshotAt(tick, 1000 + tick * 500));  // 2 per second
    }
    QLineSeries* series = view.cards().front()->utilizationSeries();
    const QList<QPointF> points = series->points();
    QVERIFY(points.size() <= 2 * DeviceCard::kWindowSeconds + 1);
    QVERIFY(points.last().x() - points.first().x() <= DeviceCard::kWindowSeconds);
    QVERIFY(points.last().x() - points.first().x() >= DeviceCard::kWindowSeconds - 1);
  }

  void anEmptySnapshotSaysThereIsNoPool() {
    PoolView view;
    view.setSnapshot(FakePoolFeed::snapshotAt(0, 1000));
    view.setSnapshot(shoal::lan::PoolSnapshot{});
    QVERIFY(view.cards().isEmpty());
    QVERIFY(view.planText().contains("No pool"));
    QVERIFY(view.diagram()->segments().isEmpty());
  }

  void cardChartsFollowAPaletteChange() {
    PoolView view;
    view.setSnapshot(FakePoolFeed::snapshotAt(0, 1000));
    DeviceCard* card = view.cards().front();
    QPalette dark = card->palette();
    dark.setColor(QPalette::Base, QColor(0x20, 0x20, 0x20));
    dark.setColor(QPalette::Text, QColor(0xee, 0xee, 0xee));
    view.setPalette(dark);  // propagates to the cards, as a system theme change does
    QChart* chart = card->utilizationSeries()->chart();
    QCOMPARE(chart->backgroundBrush().color(), QColor(0x20, 0x20, 0x20));
    QCOMPARE(chart->legend()->labelColor(), QColor(0xee, 0xee, 0xee));
  }

  void thisMachinesDevicesAreListedWithUnavailableReasons() {
    QTemporaryDir data;
    qputenv("SHOAL_DATA_DIR", data.path().toLocal8Bit());
    ChatWindow w(data.filePath("none.gguf"), data.path());
    QVERIFY(w.showPage("pool"));
    const QString text = w.poolView()->localDevicesText();
    QVERIFY2(text.contains("cpu0"), qPrintable(text));
    for (const BackendStatus& b : probeBackends()) {
      if (!b.available) QVERIFY2(text.contains(b.reason), qPrintable(text));
    }
    qunsetenv("SHOAL_DATA_DIR");
  }
};

QTEST_MAIN(TestPoolView)
#include "test_pool_view.moc"
