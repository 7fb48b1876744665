// Direct forwarding's pieces on the node (lan/node/stage_links.h), without sockets: a route's
// inbox hands rows over in order and fails fast and clearly when the link is out of step, closed,
// late or full; a route admits only the device it was opened for, once, and revoking it closes
// the inbox and the link connection and forgets the device.

#include <QtTest>
#include <chrono>
#include <thread>

#include "lan/node/stage_links.h"
#include "tests/integration/lan_node/memory_connection.h"

using namespace shoal;
using namespace shoal::lan;
using namespace std::chrono_literals;

namespace {

LinkedRows rows(int32_t first, int32_t count, float value = 1) {
  return LinkedRows{0, first, count, std::vector<float>(size_t(count) * 4, value), {}, {}};
}

}  // namespace

class TestStageLinks : public QObject {
  Q_OBJECT

 private slots:
  void inboxHandsRowsOverInOrder() {
    LinkInbox inbox(4, 16);
    inbox.push(rows(0, 3, 1), 1s);
    inbox.push(rows(3, 1, 2), 1s);
    QCOMPARE(inbox.take(0, 0, 3, 1s).hidden, std::vector<float>(12, 1));
    QCOMPARE(inbox.take(0, 3, 1, 1s).hidden, std::vector<float>(4, 2));
  }

  void rowsOutOfStepCloseTheInbox() {
    LinkInbox inbox(4, 16);
    inbox.push(rows(0, 1), 1s);
    inbox.push(rows(1, 1), 1s);
    QVERIFY_THROWS_EXCEPTION(LinkFailure, inbox.take(0, 5, 1, 1s));
    // Whatever came after is out of step too: the inbox stays closed.
    QVERIFY_THROWS_EXCEPTION(LinkFailure, inbox.take(0, 1, 1, 1s));
    QVERIFY_THROWS_EXCEPTION(LinkFailure, inbox.push(rows(2, 1), 1s));
  }

  void theUpstreamFailureReachesTheTake() {
    LinkInbox inbox(4, 16);
    inbox.push(LinkedRows{0, 0, 2, {}, "out of memory", {}}, 1s);
    try {
      inbox.take(0, 0, 2, 1s);
      QFAIL("no failure");
    } catch (const LinkFailure& e) {
      QVERIFY2(std::string(e.what()).find("out of memory") != std::string::npos, e.what());
    }
  }

  void aTakeEndsOnTimeoutOrAtOnceWhenTheLinkCloses() {
    LinkInbox inbox(4, 16);
    QVERIFY_THROWS_EXCEPTION(LinkFailure, inbox.take(0, 0, 1, 20ms));
    const auto t0 = std::chrono::steady_clock::now();
    std::thread closer([&] {
      std::this_thread::sleep_for(50ms);
      inbox.close("upstream gone");
    });
    QVERIFY_THROWS_EXCEPTION(LinkFailure, inbox.take(0, 0, 1, 30s));
    closer.join();
    QVERIFY(std::chrono::steady_clock::now() - t0 < 10s);
  }

  // The bound is in rows (kLinkInboxBatches full batches of maxBatch = 16 rows), whatever the
  // segments: a batch of many sequences pushes one small segment each.
  void aFullInboxHoldsThePusherBackThenGivesUp() {
    LinkInbox inbox(4, 16);
    const auto full = int32_t(kLinkInboxBatches) * 16;
    for (int32_t i = 0; i < full / 2; ++i) inbox.push(rows(i, 1), 1s);
    for (int32_t i = full / 2; i < full; i += 8) inbox.push(rows(i, 8), 1s);
    // A taker makes room: the waiting push goes in.
    std::thread taker([&] {
      std::this_thread::sleep_for(50ms);
      inbox.take(0, 0, 1, 1s);
    });
    inbox.push(rows(full, 1), 10s);
    taker.join();
    // Nobody takes: the push gives up and the link is dropped.
    QVERIFY_THROWS_EXCEPTION(LinkFailure, inbox.push(rows(99, 1), 30ms));
    QVERIFY_THROWS_EXCEPTION(LinkFailure, inbox.take(0, 1, 1, 1s));
  }

  void aRouteAdmitsOnlyItsDeviceOnceAndIsForgottenWhenRevoked() {
    LinkRoutes routes;
    auto inbox = std::make_shared<LinkInbox>(4, 16);
    const std::string token = routes.open(7, "\"stage-2\"", "DEV-A", inbox);
    QCOMPARE(token.size(), size_t(32));
    QVERIFY(routes.isIntroduced("DEV-A"));
    QVERIFY(!routes.isIntroduced("DEV-B"));

    auto [near, far] = test::memoryConnectionPair("node", "DEV-A");
    QVERIFY_THROWS_EXCEPTION(Error, routes.bind(token, "DEV-B", *far));
    QVERIFY_THROWS_EXCEPTION(Error, routes.bind(std::string(32, '0'), "DEV-A", *far));
    QCOMPARE(routes.bind(token, "DEV-A", *far), inbox);
    auto [near2, far2] = test::memoryConnectionPair("node", "DEV-A");
    QVERIFY_THROWS_EXCEPTION(Error, routes.bind(token, "DEV-A", *far2));  // one link per route

    // Linking the stage again replaces the route: the old inbox and connection close.
    auto fresh = std::make_shared<LinkInbox>(4, 16);
    const std::string again = routes.open(7, "\"stage-2\"", "DEV-A", fresh);
    QVERIFY(again != token);
    QVERIFY(!far->isOpen());
    QVERIFY_THROWS_EXCEPTION(LinkFailure, inbox->take(0, 0, 1, 1s));
    QCOMPARE(routes.size(), size_t(1));

    // Another owner's stage of the same name is another route.
    routes.open(8, "\"stage-2\"", "DEV-C", std::make_shared<LinkInbox>(4, 16));
    routes.revoke(7, "\"stage-2\"", "unloaded");
    QVERIFY_THROWS_EXCEPTION(LinkFailure, fresh->take(0, 0, 1, 1s));
    QVERIFY(!routes.isIntroduced("DEV-A"));
    QVERIFY(routes.isIntroduced("DEV-C"));
  }
};

QTEST_GUILESS_MAIN(TestStageLinks)
#include "test_stage_links.moc"
