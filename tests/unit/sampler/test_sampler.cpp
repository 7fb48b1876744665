// The sampler: greedy, determinism per seed, top-k, top-p, min-p, repetition penalty, reset,
// and that it stops allocating after the first call.

#include <QtTest>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <new>
#include <vector>

#include "engine/error.h"
#include "engine/runtime/sampler.h"

using shoal::runtime::Sampler;
using shoal::runtime::SamplerParams;

// Counts global allocations while g_counting is set, to check that sample() reuses its scratch.
namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

// Every filter off: a plain draw from softmax(logits / temperature).
SamplerParams plainParams(uint64_t seed) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.topK = 0;
  p.topP = 1.0f;
  p.minP = 0.0f;
  p.repeatPenalty = 1.0f;
  p.seed = seed;
  return p;
}

SamplerParams greedyParams() {
  SamplerParams p = plainParams(0);
  p.temperature = 0.0f;
  return p;
}

// Logits whose softmax is exactly the given distribution (up to rounding).
std::vector<float> logitsOf(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

// A row with many plausible ids, so that two different random streams diverge quickly.
std::vector<float> spreadLogits() {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) {
    logits[i] = 0.5f * std::sin(static_cast<float>(i) * 1.7f);
  }
  return logits;
}

std::vector<int32_t> draw(Sampler& sampler, const std::vector<float>& logits, int count) {
  std::vector<int32_t> ids;
  for (int i = 0; i < count; ++i) ids.push_back(sampler.sample(logits));
  return ids;
}

std::map<int32_t, int> histogram(const std::vector<int32_t>& ids) {
  std::map<int32_t, int> counts;
  for (int32_t id : ids) counts[id] += 1;
  return counts;
}

}  // namespace

class TestSampler : public QObject {
  Q_OBJECT

 private slots:
  void greedyPicksArgmax() {
    Sampler sampler(greedyParams());
    QCOMPARE(sampler.sample(std::vector<float>{0.1f, 2.0f, -1.0f, 1.9f}), 1);
  }

  void greedyBreaksTiesTowardLowestId() {
    Sampler sampler(greedyParams());
    QCOMPARE(sampler.sample(std::vector<float>{1.0f, 3.0f, 0.0f, 3.0f, 3.0f}), 1);
  }

  void negativeTemperatureIsGreedy() {
    SamplerParams p = plainParams(5);
    p.temperature = -1.0f;
    Sampler sampler(p);
    const std::vector<float> logits = spreadLogits();
    const auto argmax =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    for (int32_t id : draw(sampler, logits, 20)) QCOMPARE(id, argmax);
  }

  void sameSeedGivesSameSequence() {
    const std::vector<float> logits = spreadLogits();
    Sampler a(plainParams(1234));
    Sampler b(plainParams(1234));
    QCOMPARE(draw(a, logits, 200), draw(b, logits, 200));
  }

  void differentSeedGivesDifferentSequence() {
    const std::vector<float> logits = spreadLogits();
    Sampler a(plainParams(1234));
    Sampler b(plainParams(4321));
    QVERIFY(draw(a, logits, 200) != draw(b, logits, 200));
  }

  void topKOfOneEqualsGreedy() {
    SamplerParams p = plainParams(7);
    p.temperature = 1.5f;
    p.topK = 1;
    Sampler topOne(p);
    Sampler greedy(greedyParams());
    const std::vector<std::vector<float>> rows = {
        spreadLogits(), {0.0f, 5.0f, 5.0f, 1.0f}, {-3.0f, -2.0f, -2.5f}, {4.0f}};
    for (const auto& row : rows) {
      for (int i = 0; i < 20; ++i) QCOMPARE(topOne.sample(row), greedy.sample(row));
    }
  }

  void topKDrawsOnlyTheKLargest() {
    SamplerParams p = plainParams(11);
    p.topK = 2;
    Sampler sampler(p);
    const std::vector<float> logits = {1.0f, 3.0f, 0.5f, 2.9f, 2.0f};
    const auto counts = histogram(draw(sampler, logits, 5000));
    QCOMPARE(counts.size(), size_t{2});
    QVERIFY(counts.count(1) == 1 && counts.count(3) == 1);
  }

  void topPKeepsSmallestSetReachingP() {
    // Sorted: id3 0.50, id0 0.25, id4 0.15, id1 0.07, id2 0.03. Mass 0.75 after two ids is
    // below 0.8, 0.90 after three reaches it: {3, 0, 4} is the smallest such set.
    SamplerParams p = plainParams(21);
    p.topP = 0.8f;
    Sampler sampler(p);
    const std::vector<float> logits = logitsOf({0.25, 0.07, 0.03, 0.50, 0.15});
    const int n = 20000;
    const auto counts = histogram(draw(sampler, logits, n));
    QCOMPARE(counts.size(), size_t{3});
    // Renormalised over the kept set: 0.5/0.9, 0.25/0.9, 0.15/0.9.
    const std::map<int32_t, double> expected = {{3, 0.5 / 0.9}, {0, 0.25 / 0.9}, {4, 0.15 / 0.9}};
    for (const auto& [id, share] : expected) {
      QVERIFY2(counts.count(id) == 1, qPrintable(QString("id %1 never drawn").arg(id)));
      const double observed = static_cast<double>(counts.at(id)) / n;
      QVERIFY2(std::abs(observed - share) < 0.03,
               qPrintable(QString("id %1: %2 vs %3").arg(id).arg(observed).arg(share)));
    }
  }

  void minPExcludesIdsBelowFractionOfTheLargest() {
    // pmax 0.4, minP 0.3: ids under 0.12 (0.10 and 0.05) are out, 0.15 stays.
    SamplerParams p = plainParams(31);
    p.minP = 0.3f;
    Sampler sampler(p);
    const std::vector<float> logits = logitsOf({0.10, 0.40, 0.05, 0.30, 0.15});
    const auto counts = histogram(draw(sampler, logits, 20000));
    QCOMPARE(counts.size(), size_t{3});
    QVERIFY(counts.count(1) == 1 && counts.count(3) == 1 && counts.count(4) == 1);
  }

  void drawsFollowTheDistribution() {
    Sampler sampler(plainParams(41));
    const std::vector<double> probs = {0.1, 0.6, 0.3};
    const int n = 20000;
    const auto counts = histogram(draw(sampler, logitsOf(probs), n));
    for (int32_t id = 0; id < 3; ++id) {
      const double observed = static_cast<double>(counts.count(id) ? counts.at(id) : 0) / n;
      QVERIFY2(std::abs(observed - probs[static_cast<size_t>(id)]) < 0.03,
               qPrintable(QString("id %1: %2").arg(id).arg(observed)));
    }
  }

  // Speculative decoding's rejection rule keeps the distribution whatever the draft: a likely
  // one, an unlikely one, one that top-k filters out (never accepted); greedy accepts exactly
  // the argmax.
  void draftRejectionRuleKeepsTheDistribution() {
    const std::vector<double> probs = {0.1, 0.6, 0.25, 0.05};
    const auto logits = logitsOf(probs);
    SamplerParams p = plainParams(61);
    p.topK = 3;  // id 3 is out: the others renormalized to 0.1/0.95, 0.6/0.95, 0.25/0.95
    for (const int32_t draftId : {1, 0, 3}) {
      Sampler sampler(p);
      const int n = 20000;
      std::map<int32_t, int> counts;
      int accepted = 0;
      for (int i = 0; i < n; ++i) {
        bool ok = false;
        const int32_t t = sampler.sampleDraft(logits, draftId, ok);
        QCOMPARE(ok, t == draftId);
        accepted += ok ? 1 : 0;
        ++counts[t];
      }
      for (int32_t id = 0; id < 4; ++id) {
        const double want = id == 3 ? 0.0 : probs[static_cast<size_t>(id)] / 0.95;
        const double observed = static_cast<double>(counts[id]) / n;
        QVERIFY2(std::abs(observed - want) < 0.02,
                 qPrintable(QString("draft %1, id %2: %3 (want %4)")
                                .arg(draftId)
                                .arg(id)
                                .arg(observed)
                                .arg(want)));
      }
      QCOMPARE(accepted, counts[draftId]);
    }
    Sampler greedy(greedyParams());
    bool ok = false;
    QCOMPARE(greedy.sampleDraft(logits, 1, ok), 1);
    QVERIFY(ok);
    QCOMPARE(greedy.sampleDraft(logits, 2, ok), 1);
    QVERIFY(!ok);
  }

  void lowTemperatureConcentratesOnTheArgmax() {
    SamplerParams p = plainParams(51);
    p.temperature = 0.01f;
    Sampler sampler(p);
    const auto counts = histogram(draw(sampler, logitsOf({0.35, 0.40, 0.25}), 2000));
    QCOMPARE(counts.size(), size_t{1});
    QCOMPARE(counts.begin()->first, 1);
  }

  void repetitionPenaltyChangesTheArgmax() {
    SamplerParams p = greedyParams();
    p.repeatPenalty = 1.5f;
    Sampler sampler(p);
    const std::vector<float> positive = {2.0f, 1.8f, -1.0f};
    QCOMPARE(sampler.sample(positive), 0);
    sampler.accept(0);  // 2.0 / 1.5 = 1.33 < 1.8
    QCOMPARE(sampler.sample(positive), 1);

    Sampler negative(p);
    negative.accept(0);  // -0.5 * 1.5 = -0.75 < -0.6
    QCOMPARE(negative.sample(std::vector<float>{-0.5f, -0.6f}), 1);
  }

  void repetitionPenaltyLooksOnlyAtLastN() {
    SamplerParams p = greedyParams();
    p.repeatPenalty = 1.5f;
    p.repeatLastN = 2;
    Sampler sampler(p);
    const std::vector<float> logits = {2.0f, 1.8f, -1.0f};
    sampler.accept(0);
    QCOMPARE(sampler.sample(logits), 1);
    sampler.accept(2);
    sampler.accept(2);  // token 0 has left the window of 2
    QCOMPARE(sampler.sample(logits), 0);
  }

  void resetRestoresTheSequenceAndForgetsHistory() {
    const std::vector<float> logits = spreadLogits();
    SamplerParams p = plainParams(99);
    Sampler sampler(p);
    const std::vector<int32_t> first = draw(sampler, logits, 100);
    sampler.reset();
    QCOMPARE(draw(sampler, logits, 100), first);

    SamplerParams g = greedyParams();
    g.repeatPenalty = 1.5f;
    Sampler penalised(g);
    penalised.accept(0);
    QCOMPARE(penalised.sample(std::vector<float>{2.0f, 1.8f}), 1);
    penalised.reset();
    QCOMPARE(penalised.sample(std::vector<float>{2.0f, 1.8f}), 0);
  }

  void nanLogitsAreNeverDrawn() {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> logits = {nan, 1.0f, nan, 0.5f};
    Sampler greedy(greedyParams());
    QCOMPARE(greedy.sample(logits), 1);
    Sampler sampler(plainParams(61));
    for (int32_t id : draw(sampler, logits, 2000)) QVERIFY(id == 1 || id == 3);
  }

  void maskedLogitsAreNeverDrawn() {
    const float inf = std::numeric_limits<float>::infinity();
    Sampler sampler(plainParams(71));
    for (int32_t id : draw(sampler, std::vector<float>{-inf, 0.0f, -inf, 0.0f}, 2000)) {
      QVERIFY(id == 1 || id == 3);
    }
    QCOMPARE(sampler.sample(std::vector<float>{-inf, -inf}), 0);
  }

  void noAllocationAfterTheFirstCall() {
    SamplerParams p;  // the defaults: top-k, top-p, min-p, temperature all on
    p.repeatPenalty = 1.1f;
    Sampler sampler(p);
    std::vector<float> logits(32000);
    for (size_t i = 0; i < logits.size(); ++i) {
      logits[i] = 3.0f * std::sin(static_cast<float>(i) * 0.37f);
    }
    for (int32_t t = 0; t < 100; ++t) sampler.accept(t);
    sampler.sample(logits);

    SamplerParams unsorted = p;
    unsorted.topK = 0;  // full sort for top-p
    Sampler full(unsorted);
    full.sample(logits);

    g_allocations = 0;
    g_counting = true;
    for (int i = 0; i < 20; ++i) {
      sampler.accept(sampler.sample(logits));
      full.accept(full.sample(logits));
    }
    g_counting = false;
    QCOMPARE(g_allocations.load(), 0L);
  }

  void emptyLogitsAreRefused() {
    Sampler sampler(plainParams(0));
    QVERIFY_THROWS_EXCEPTION(shoal::Error, sampler.sample(std::span<const float>()));
  }

  void meaninglessParamsAreRefused() {
    SamplerParams p = plainParams(0);
    p.repeatPenalty = 0.0f;
    QVERIFY_THROWS_EXCEPTION(shoal::Error, Sampler{p});
    p = plainParams(0);
    p.repeatLastN = -1;
    QVERIFY_THROWS_EXCEPTION(shoal::Error, Sampler{p});
    p = plainParams(0);
    p.temperature = std::numeric_limits<float>::quiet_NaN();
    QVERIFY_THROWS_EXCEPTION(shoal::Error, Sampler{p});
    Sampler sampler(plainParams(0));
    QVERIFY_THROWS_EXCEPTION(shoal::Error, sampler.accept(-1));
  }
};

QTEST_APPLESS_MAIN(TestSampler)
#include "test_sampler.moc"
