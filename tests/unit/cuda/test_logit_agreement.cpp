// The GPU backends' end-to-end accuracy measure (tests/gpu/logit_agreement.h) on hand-computed
// cases: identical rows agree with KL 0; KL(p || q) matches the closed form; a different
// argmax counts against top-1; a missing or NaN row fails the contract.

#include <QtTest>
#include <cmath>
#include <limits>
#include <vector>

#include "tests/gpu/logit_agreement.h"

using shoal::gpu_test::LogitAgreement;

class TestLogitAgreement : public QObject {
  Q_OBJECT
 private slots:
  void identicalRowsAgree() {
    LogitAgreement a;
    const std::vector<float> row = {1.f, -2.f, 0.5f, 3.f};
    a.add(row, row);
    a.add(row, row);
    QCOMPARE(a.positions(), size_t{2});
    QCOMPARE(a.top1Agreement(), 1.0);
    QCOMPARE(a.meanKl(), 0.0);
    QVERIFY(a.meetsContract());
  }

  void klMatchesTheClosedForm() {
    // p = softmax(0, ln 3) = (1/4, 3/4), q = softmax(0, 0) = (1/2, 1/2):
    // KL = 1/4 ln(1/2) + 3/4 ln(3/2).
    LogitAgreement a;
    const std::vector<float> p = {0.f, static_cast<float>(std::log(3.0))};
    const std::vector<float> q = {5.f, 5.f};  // a shift changes nothing
    a.add(p, q);
    const double want = 0.25 * std::log(0.5) + 0.75 * std::log(1.5);
    QVERIFY2(std::abs(a.meanKl() - want) < 1e-7, qPrintable(QString::number(a.meanKl())));
    QCOMPARE(a.maxKl(), a.meanKl());
    QVERIFY(!a.meetsContract());  // 0.13 nats is far over 0.01
  }

  void top1CountsPositions() {
    LogitAgreement a;
    const std::vector<float> ref = {0.f, 10.f, 0.f};
    const std::vector<float> same = {0.f, 9.f, 0.f};
    const std::vector<float> other = {0.f, 9.f, 9.5f};
    for (int i = 0; i < 99; ++i) a.add(ref, same);
    a.add(ref, other);
    QCOMPARE(a.positions(), size_t{100});
    QCOMPARE(a.top1Agreement(), 0.99);
  }

  // Only positions where the reference's top-2 margin is >= kDecisiveMargin bind the top-1
  // bound: a flipped near-tie is rounding, a flipped clear winner is a fault.
  void topOneBindsOnlyDecisivePositions() {
    const float tie = float(LogitAgreement::kDecisiveMargin) / 2;
    const std::vector<float> nearTie = {0.f, tie, 0.f}, flipped = {0.f, 0.f, tie};
    LogitAgreement a;
    for (int i = 0; i < 10; ++i) a.add(nearTie, flipped);
    QCOMPARE(a.top1Agreement(), 0.0);
    QCOMPARE(a.decisivePositions(), size_t{0});
    QCOMPARE(a.maxMissMargin(), double(tie));
    QVERIFY(a.meanKl() < LogitAgreement::kMaxMeanKl);
    QVERIFY(a.meetsContract());
    const float clear = float(LogitAgreement::kDecisiveMargin) * 4;
    const std::vector<float> winner = {0.f, clear, 0.f}, other = {0.f, 0.f, clear};
    LogitAgreement b;
    b.add(winner, other);
    QCOMPARE(b.decisivePositions(), size_t{1});
    QCOMPARE(b.decisiveTop1Agreement(), 0.0);
    QVERIFY(!b.meetsContract());
  }

  void brokenRowsFail() {
    LogitAgreement missing;
    const std::vector<float> ref = {0.f, 1.f};
    missing.add(ref, {});
    QVERIFY(!missing.meetsContract());
    LogitAgreement nan;
    const std::vector<float> bad = {0.f, std::numeric_limits<float>::quiet_NaN()};
    nan.add(ref, bad);
    QVERIFY(std::isinf(nan.meanKl()));
    QVERIFY(!nan.meetsContract());
  }
};

QTEST_GUILESS_MAIN(TestLogitAgreement)
#include "test_logit_agreement.moc"
