// The per-source beacon rate limit (lan/discovery/rate_limiter.h): a token bucket per source
// address, bounded in how many sources it tracks — with explicit time points, no sleeping.

#include <QtTest>
#include <chrono>

#include "lan/discovery/rate_limiter.h"

using shoal::lan::DiscoveryClock;
using shoal::lan::kBeaconBurstPerSource;
using shoal::lan::kBeaconsPerSecondPerSource;
using shoal::lan::SourceRateLimiter;
using namespace std::chrono_literals;

namespace {

const DiscoveryClock::time_point t0 = DiscoveryClock::time_point() + 1h;

// How many of `count` datagrams from `source` at `at` are allowed.
int allowed(SourceRateLimiter& limiter, const std::string& source, int count,
            DiscoveryClock::time_point at) {
  int n = 0;
  for (int i = 0; i < count; ++i) n += limiter.allow(source, at) ? 1 : 0;
  return n;
}

}  // namespace

class TestRateLimiter : public QObject {
  Q_OBJECT

 private slots:
  void aFloodFromOneSourceGetsOnlyTheBurst() {
    SourceRateLimiter limiter;
    QCOMPARE(allowed(limiter, "10.0.0.9", 20000, t0), int(kBeaconBurstPerSource));
  }

  void theBucketRefillsAtTheSustainedRate() {
    SourceRateLimiter limiter;
    allowed(limiter, "10.0.0.9", 1000, t0);
    QCOMPARE(allowed(limiter, "10.0.0.9", 1000, t0 + 1s), int(kBeaconsPerSecondPerSource));
  }

  void aRealSendersRateIsNeverLimited() {
    // Three paths a second (multicast, broadcast, unicast) for a minute.
    SourceRateLimiter limiter;
    int n = 0;
    for (int s = 0; s < 60; ++s) n += allowed(limiter, "10.0.0.2", 3, t0 + std::chrono::seconds(s));
    QCOMPARE(n, 180);
  }

  void oneSourcesFloodDoesNotLimitAnother() {
    SourceRateLimiter limiter;
    allowed(limiter, "10.0.0.9", 20000, t0);
    QVERIFY(limiter.allow("10.0.0.2", t0));
  }

  void newSourcesBeyondTheCapAreRefused() {
    SourceRateLimiter limiter(10, 20, 4);
    for (int i = 0; i < 4; ++i) QVERIFY(limiter.allow("fe80::" + std::to_string(i), t0));
    QVERIFY(!limiter.allow("fe80::99", t0));
    QCOMPARE(limiter.trackedSources(), size_t(4));
    QVERIFY(limiter.allow("fe80::0", t0));  // a tracked source is still served
  }

  void idleSourcesAreForgottenToMakeRoom() {
    SourceRateLimiter limiter(10, 20, 4);
    for (int i = 0; i < 4; ++i) limiter.allow("fe80::" + std::to_string(i), t0);
    QVERIFY(limiter.allow("fe80::99", t0 + shoal::lan::kSourceIdleForget));
    QCOMPARE(limiter.trackedSources(), size_t(1));
  }
};

QTEST_GUILESS_MAIN(TestRateLimiter)
#include "test_rate_limiter.moc"
