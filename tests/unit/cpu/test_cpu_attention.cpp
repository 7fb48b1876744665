// attention(): close to double-precision attention over the same f16 cache, causal, blind to
// cache positions it must not see (later ones, and with a sliding window earlier ones), and
// independent of the thread count.

#include <QtTest>
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_test_util.h"
#include "engine/gguf/dequantize.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/kernel_table.h"

using namespace shoal;
using namespace shoal::cpu;

namespace {

struct Setup {
  AttentionShape shape;
  std::vector<float> q;
  std::vector<uint16_t> keys, values;  // values transposed, valueStride() apart

  Setup(int32_t count, int32_t cached, uint32_t seed) {
    shape.nHead = 4;
    shape.nHeadKv = 2;
    shape.headDim = 64;
    shape.contextLength = 100;
    shape.scale = 1.0f / 8.0f;
    const int64_t kv = shape.kvDim();
    q = test::randomValues(static_cast<size_t>(count * shape.nHead * shape.headDim), seed, 2.0f);
    const auto k =
        test::randomValues(static_cast<size_t>(shape.contextLength * kv), seed + 1, 2.0f);
    const auto v = test::randomValues(static_cast<size_t>(shape.contextLength * kv), seed + 2);
    keys.assign(k.size(), 0);
    values.assign(static_cast<size_t>(shape.valueStride() * kv), 0);
    for (int64_t p = 0; p < cached; ++p) {
      for (int64_t i = 0; i < kv; ++i) {
        keys[static_cast<size_t>(p * kv + i)] =
            gguf::floatToHalf(k[static_cast<size_t>(p * kv + i)]);
        values[static_cast<size_t>(i * shape.valueStride() + p)] =
            gguf::floatToHalf(v[static_cast<size_t>(p * kv + i)]);
      }
    }
  }

  std::vector<float> run(int32_t count, int32_t first, int threads, int32_t window = 0,
                         bool headMajor = false, int32_t orderTokens = 0, int32_t queryRow = 0,
                         bool inItems = false) {
    shape.window = window;
    shape.headMajorKeys = headMajor;
    ThreadPool pool(threads);
    AttentionScratch scratch;
    scratch.reserve(shape, threads);
    if (inItems) scratch.passBytes = 0;
    std::vector<float> out(static_cast<size_t>(count * shape.nHead * shape.headDim), NAN);
    const std::vector<uint16_t> k = headMajor ? headMajorKeys() : keys;
    attention(shape, q.data() + static_cast<size_t>(queryRow * shape.nHead * shape.headDim), count,
              first, k.data(), values.data(), out.data(), pool, scratch, orderTokens);
    shape.headMajorKeys = false;
    return out;
  }

  // The keys laid out head-major (AttentionShape::headMajorKeys).
  std::vector<uint16_t> headMajorKeys() const {
    const int64_t hd = shape.headDim, kv = shape.kvDim();
    std::vector<uint16_t> out(keys.size());
    for (int64_t p = 0; p < shape.contextLength; ++p)
      for (int64_t g = 0; g < shape.nHeadKv; ++g)
        for (int64_t i = 0; i < hd; ++i)
          out[static_cast<size_t>((g * shape.contextLength + p) * hd + i)] =
              keys[static_cast<size_t>(p * kv + g * hd + i)];
    return out;
  }

  // Double-precision attention over the same f16 keys and values.
  std::vector<double> exact(int32_t count, int32_t first, int32_t window = 0) const {
    const int64_t hd = shape.headDim, kv = shape.kvDim(), qd = shape.nHead * hd;
    std::vector<double> out(static_cast<size_t>(count * qd));
    for (int32_t t = 0; t < count; ++t) {
      for (int32_t h = 0; h < shape.nHead; ++h) {
        const int64_t kvh = h / (shape.nHead / shape.nHeadKv);
        const int32_t visible = first + t + 1;
        const int32_t from = window > 0 ? std::max(0, visible - window) : 0;
        std::vector<double> s(static_cast<size_t>(visible), -INFINITY);
        double max = -INFINITY, sum = 0;
        for (int32_t p = from; p < visible; ++p) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) {
            d += static_cast<double>(q[static_cast<size_t>(t * qd + h * hd + i)]) *
                 gguf::halfToFloat(keys[static_cast<size_t>(p * kv + kvh * hd + i)]);
          }
          s[static_cast<size_t>(p)] = d * shape.scale;
          max = std::max(max, s[static_cast<size_t>(p)]);
        }
        for (double& e : s) sum += (e = std::exp(e - max));  // exp(-inf) = 0 before the window
        for (int64_t i = 0; i < hd; ++i) {
          double o = 0;
          for (int32_t p = 0; p < visible; ++p) {
            o += s[static_cast<size_t>(p)] / sum *
                 gguf::halfToFloat(
                     values[static_cast<size_t>((kvh * hd + i) * shape.valueStride() + p)]);
          }
          out[static_cast<size_t>(t * qd + h * hd + i)] = o;
        }
      }
    }
    return out;
  }
};

}  // namespace

class CpuAttentionTest : public QObject {
  Q_OBJECT

 private slots:
  // Queries and probabilities are rounded to f16 on the way (as in llama.cpp), so agreement is
  // to about f16 precision.
  void matchesDoublePrecisionAttention_data() {
    QTest::addColumn<int>("count");
    QTest::addColumn<int>("first");
    QTest::newRow("decode at 0") << 1 << 0;
    QTest::newRow("decode at 70") << 1 << 70;
    QTest::newRow("batch of 7 at 0") << 7 << 0;
    QTest::newRow("batch of 5 at 33") << 5 << 33;
  }
  void matchesDoublePrecisionAttention() {
    QFETCH(int, count);
    QFETCH(int, first);
    Setup s(count, first + count, 5);
    const auto got = s.run(count, first, 2);
    const double nmse = test::normalizedMse(got, s.exact(count, first));
    QVERIFY2(nmse < 1e-5, qPrintable(QString("nmse %1").arg(nmse)));
  }

  void tokenIgnoresLaterPositions() {
    Setup s(6, 6, 9);
    const auto before = s.run(6, 0, 1);
    // Rewrite what positions 4 and 5 hold: tokens 0..3 must not change at all.
    for (int64_t i = 0; i < s.shape.kvDim(); ++i) {
      for (int64_t p : {4, 5}) {
        s.keys[static_cast<size_t>(p * s.shape.kvDim() + i)] = gguf::floatToHalf(3.0f);
        s.values[static_cast<size_t>(i * s.shape.valueStride() + p)] = gguf::floatToHalf(-7.0f);
      }
    }
    const auto after = s.run(6, 0, 1);
    const size_t firstFour = static_cast<size_t>(4 * s.shape.nHead * s.shape.headDim);
    QVERIFY(test::firstBitDifference(before.data(), after.data(), firstFour) < 0);
  }

  // Positions past the cache are read by the zero-padded dot products, times probability 0.
  void stalePositionsPastTheCacheDoNotMatter() {
    Setup s(1, 10, 13);
    const auto clean = s.run(1, 9, 1);
    for (int64_t i = 0; i < s.shape.kvDim(); ++i) {
      for (int64_t p = 10; p < s.shape.valueStride(); ++p) {
        s.values[static_cast<size_t>(i * s.shape.valueStride() + p)] = gguf::floatToHalf(1000.0f);
      }
    }
    const auto stale = s.run(1, 9, 1);
    QVERIFY(test::firstBitDifference(clean.data(), stale.data(), clean.size()) < 0);
  }

  void slidingWindowMatchesDoublePrecisionAttention_data() {
    QTest::addColumn<int>("count");
    QTest::addColumn<int>("first");
    QTest::addColumn<int>("window");
    QTest::newRow("decode at 70, window 20") << 1 << 70 << 20;
    QTest::newRow("decode at 70, window 1") << 1 << 70 << 1;
    QTest::newRow("batch of 7 at 33, window 5") << 7 << 33 << 5;
    QTest::newRow("batch of 5 at 40, window 40") << 5 << 40 << 40;
  }
  void slidingWindowMatchesDoublePrecisionAttention() {
    QFETCH(int, count);
    QFETCH(int, first);
    QFETCH(int, window);
    Setup s(count, first + count, 17);
    const auto got = s.run(count, first, 2, window);
    const double nmse = test::normalizedMse(got, s.exact(count, first, window));
    QVERIFY2(nmse < 1e-5, qPrintable(QString("nmse %1").arg(nmse)));
    // The window really hides something: full attention gives another answer.
    QVERIFY(test::normalizedMse(got, s.exact(count, first)) > 1e-3);
  }

  void slidingWindowIgnoresEarlierPositions() {
    Setup s(1, 50, 23);
    const auto before = s.run(1, 49, 1, 10);
    for (int64_t i = 0; i < s.shape.kvDim(); ++i) {
      for (int64_t p = 0; p < 40; ++p) {
        s.keys[static_cast<size_t>(p * s.shape.kvDim() + i)] = gguf::floatToHalf(3.0f);
        s.values[static_cast<size_t>(i * s.shape.valueStride() + p)] = gguf::floatToHalf(-7.0f);
      }
    }
    const auto after = s.run(1, 49, 1, 10);
    QVERIFY(test::firstBitDifference(before.data(), after.data(), before.size()) < 0);
  }

  // A window at least as long as the history is full attention, to the bit.
  void windowCoveringEverythingIsFullAttention() {
    Setup s(5, 40, 29);
    const auto full = s.run(5, 35, 2);
    const auto windowed = s.run(5, 35, 2, 40);
    QVERIFY(test::firstBitDifference(full.data(), windowed.data(), full.size()) < 0);
  }

  // The CPU stage's head-major key cache gives the same bits as llama.cpp's position-major one.
  void keyLayoutsGiveTheSameBits() {
    Setup s(6, 70, 31);
    for (int threads : {1, 3}) {
      for (int32_t window : {0, 20}) {
        const auto byPosition = s.run(6, 64, threads, window);
        const auto byHead = s.run(6, 64, threads, window, true);
        QVERIFY(test::firstBitDifference(byPosition.data(), byHead.data(), byPosition.size()) < 0);
      }
    }
  }

  // In decode order, tokens attended together (sharing key and value rows, some of them across a
  // 64-position padding boundary) each give exactly what attending it alone gives.
  void decodeOrderTokensMatchTheirSoloRuns() {
    Setup s(9, 70, 41);
    const int64_t width = s.shape.nHead * s.shape.headDim;
    for (int threads : {1, 2}) {
      const auto together = s.run(9, 58, threads, 0, true, 1);
      for (int32_t t = 0; t < 9; ++t) {
        const auto alone = s.run(1, 58 + t, threads, 0, true, 1, t);
        QVERIFY2(test::firstBitDifference(together.data() + t * width, alone.data(),
                                          static_cast<size_t>(width)) < 0,
                 qPrintable(QString("token %1, %2 threads").arg(t).arg(threads)));
      }
    }
  }

  // Small calls run in three passes over all threads (K·q by positions, softmax by query, V·p by
  // value rows), larger ones in items of heads and tokens: the same dots, the same bits, in
  // either dot order, with a window, soft-capping and either key layout.
  void passesAndItemsGiveTheSameBits() {
    Setup s(9, 100, 47);
    for (int threads : {1, 3}) {
      for (int32_t count : {1, 3, 9}) {
        for (int32_t first : {0, 35, 64, 90}) {
          if (first + count > 100) continue;
          for (int32_t window : {0, 20}) {
            for (int32_t order : {0, 1}) {
              for (float softcap : {0.0f, 30.0f}) {
                s.shape.softcap = softcap;
                const bool headMajor = first % 2 == 0;
                const auto passes = s.run(count, first, threads, window, headMajor, order);
                const auto items = s.run(count, first, threads, window, headMajor, order, 0, true);
                s.shape.softcap = 0;
                QVERIFY2(test::firstBitDifference(passes.data(), items.data(), passes.size()) < 0,
                         qPrintable(QString("%1 tokens at %2, window %3, order %4, cap %5, %6 "
                                            "threads")
                                        .arg(count)
                                        .arg(first)
                                        .arg(window)
                                        .arg(order)
                                        .arg(softcap)
                                        .arg(threads)));
              }
            }
          }
        }
      }
    }
  }

  void resultDoesNotDependOnThreadCount() {
    Setup s(5, 40, 21);
    const auto one = s.run(5, 35, 1);
    const auto two = s.run(5, 35, 2);
    QVERIFY(test::firstBitDifference(one.data(), two.data(), one.size()) < 0);
  }
};

QTEST_GUILESS_MAIN(CpuAttentionTest)
#include "test_cpu_attention.moc"
