// The float kernels whose rounding ggml defines with SIMD code: the exp behind the softmax and
// SwiGLU, the softmax numerator, SwiGLU, f16 dot products in both orders, half conversion.
// Every SIMD level matches the scalar reference bit for bit; the reference is accurate.

#include <QtTest>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_test_util.h"
#include "engine/gguf/dequantize.h"
#include "kernels/cpu/ggml_order.h"
#include "kernels/cpu/kernel_table.h"

using namespace shoal;
using namespace shoal::cpu;

namespace {

float ulpsApart(float a, double exact) {
  const float e = static_cast<float>(exact);
  const float ulp = std::nextafter(std::fabs(e), INFINITY) - std::fabs(e);
  return static_cast<float>(std::fabs(static_cast<double>(a) - exact) / ulp);
}

QString levelName(Isa isa) { return QString::fromStdString(std::string(isaName(isa))); }

}  // namespace

class CpuVectorKernelsTest : public QObject {
  Q_OBJECT

 private slots:
  // ggml documents its exp as within 1.45 ulp plus the final rounding; the worst seen on this
  // grid is 2.14 ulp (near -47.5).
  void ggmlExpIsWithinTwoAndAHalfUlps() {
    for (float x = -87.0f; x < 88.0f; x += 0.0137f) {
      const float got = order::exp(x);
      QVERIFY2(ulpsApart(got, std::exp(static_cast<double>(x))) <= 2.5f,
               qPrintable(QString("exp(%1) = %2").arg(x).arg(got)));
    }
    QCOMPARE(order::exp(-INFINITY), 0.0f);
    QCOMPARE(order::exp(-200.0f), 0.0f);
    QVERIFY(std::isinf(order::exp(200.0f)));
    QCOMPARE(order::exp(0.0f), 1.0f);
  }

  void softmaxExpMatchesReferenceBitForBit() {
    for (int64_t n : {1, 15, 16, 17, 64, 100, 333}) {
      auto x = test::randomValues(static_cast<size_t>(n), static_cast<uint32_t>(n), 8.0f);
      for (auto& v : x) v = -std::fabs(v);
      if (n > 20) x[17] = -100.0f;  // past exp's fast range: the lanes take the careful path
      if (n > 40) x[40] = -1e30f;
      std::vector<float> ref(static_cast<size_t>(n)), got(ref.size());
      const double refSum = referenceKernels().softmaxExp(x.data(), 0.0f, ref.data(), n);
      for (Isa isa : test::simdLevels()) {
        const double sum = kernelsFor(isa)->softmaxExp(x.data(), 0.0f, got.data(), n);
        QVERIFY2(test::firstBitDifference(got.data(), ref.data(), ref.size()) < 0,
                 qPrintable(levelName(isa) + QString(" n=%1").arg(n)));
        QCOMPARE(sum, refSum);
      }
      double exact = 0;
      for (float v : x) exact += std::exp(static_cast<double>(v));
      QVERIFY(std::fabs(refSum - exact) <= 1e-6 * exact);
    }
  }

  void swigluMatchesReferenceBitForBit() {
    for (int64_t n : {1, 15, 16, 33, 1536}) {
      auto gate = test::randomValues(static_cast<size_t>(n), 3u + static_cast<uint32_t>(n), 4.0f);
      const auto up = test::randomValues(static_cast<size_t>(n), 5u, 1.0f);
      if (n > 100) {
        gate[3] = 95.0f;
        gate[4] = -95.0f;
      }
      std::vector<float> ref(static_cast<size_t>(n)), got(ref.size());
      referenceKernels().swiglu(gate.data(), up.data(), ref.data(), n);
      for (Isa isa : test::simdLevels()) {
        kernelsFor(isa)->swiglu(gate.data(), up.data(), got.data(), n);
        QVERIFY2(test::firstBitDifference(got.data(), ref.data(), ref.size()) < 0,
                 qPrintable(levelName(isa) + QString(" n=%1").arg(n)));
      }
      for (size_t i = 0; i < ref.size(); ++i) {
        const double g = gate[i];
        const double exact = g / (1.0 + std::exp(-g)) * up[i];
        QVERIFY(std::fabs(ref[i] - exact) <= 1e-6 * std::fabs(exact) + 1e-30);
      }
    }
  }

  void halfDotsMatchReferenceBitForBit() {
    for (int64_t n : {16, 64, 80, 200, 1024}) {
      const auto xf = test::randomValues(static_cast<size_t>(n), 11u + static_cast<uint32_t>(n));
      const auto yf = test::randomValues(static_cast<size_t>(n), 13u + static_cast<uint32_t>(n));
      std::vector<uint16_t> x(xf.size()), y(yf.size());
      referenceKernels().floatToHalf(xf.data(), x.data(), n);
      referenceKernels().floatToHalf(yf.data(), y.data(), n);
      double exact = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        exact += static_cast<double>(gguf::halfToFloat(x[i])) * gguf::halfToFloat(y[i]);
      }
      for (DotOrder order : {DotOrder::Vec, DotOrder::Tiled}) {
        if (order == DotOrder::Tiled && n % 16 != 0) continue;
        const float ref = referenceKernels().dotF16(x.data(), y.data(), n, order);
        QVERIFY(std::fabs(ref - exact) <= 1e-5 * std::sqrt(static_cast<double>(n)));
        for (Isa isa : test::simdLevels()) {
          const float got = kernelsFor(isa)->dotF16(x.data(), y.data(), n, order);
          QVERIFY2(test::firstBitDifference(&got, &ref, 1) < 0,
                   qPrintable(levelName(isa) + QString(" n=%1").arg(n)));
        }
      }
    }
  }

  // dotsF16 (attention's K·q and V·p) gives each (query, row) exactly its dotF16: short rows
  // (reduced 16 at a time), long rows (tiles of rows and queries), ragged row and query counts,
  // strides wider than a row, and a Vec length with a tail that the one-dot kernel sums.
  void halfDotBatchesMatchOneDotEach() {
    for (int64_t n : {16, 64, 128, 256, 272, 320, 1024, 1040, 100}) {
      for (int64_t count : {1, 3, 6, 16, 17, 64}) {
        for (int32_t queries : {1, 2, 3, 4, 5, 6, 8, 13, 15}) {
          const int64_t stride = n + 24, yStride = n + 8, outStride = count + 5;
          const auto rf = test::randomValues(static_cast<size_t>(stride * count),
                                             static_cast<uint32_t>(5 + n), 2.0f);
          const auto yf = test::randomValues(static_cast<size_t>(yStride * queries),
                                             static_cast<uint32_t>(7 + count));
          std::vector<uint16_t> rows(rf.size()), y16(yf.size());
          std::vector<float> y32(yf.size());
          referenceKernels().floatToHalf(rf.data(), rows.data(), static_cast<int64_t>(rf.size()));
          referenceKernels().floatToHalf(yf.data(), y16.data(), static_cast<int64_t>(yf.size()));
          referenceKernels().halfToFloat(y16.data(), y32.data(), static_cast<int64_t>(yf.size()));
          for (DotOrder order : {DotOrder::Vec, DotOrder::Tiled}) {
            if (order == DotOrder::Tiled && n % 16 != 0) continue;
            for (const KernelTable* t :
                 {&referenceKernels(), kernelsFor(Isa::Avx2), kernelsFor(Isa::Avx512),
                  kernelsFor(Isa::Neon), kernelsFor(Isa::NeonDot)}) {
              if (!t) continue;
              std::vector<float> got(static_cast<size_t>(outStride * queries), NAN);
              HalfDots d;
              d.rows = rows.data();
              d.rowStride = stride;
              d.count = count;
              d.y16 = y16.data();
              d.y32 = y32.data();
              d.yStride = yStride;
              d.queries = queries;
              d.n = n;
              d.order = order;
              d.out = got.data();
              d.outStride = outStride;
              t->dotsF16(d);
              for (int32_t q = 0; q < queries; ++q) {
                for (int64_t j = 0; j < outStride; ++j) {
                  const float g = got[static_cast<size_t>(q * outStride + j)];
                  if (j >= count) {
                    QVERIFY(std::isnan(g));  // nothing written past count
                    continue;
                  }
                  const float want = referenceKernels().dotF16(rows.data() + j * stride,
                                                               y16.data() + q * yStride, n, order);
                  QVERIFY2(test::firstBitDifference(&g, &want, 1) < 0,
                           qPrintable(levelName(t->isa) +
                                      QString(" n=%1 count=%2 queries=%3 (%4, %5) order %6")
                                          .arg(n)
                                          .arg(count)
                                          .arg(queries)
                                          .arg(q)
                                          .arg(j)
                                          .arg(order == DotOrder::Vec ? "vec" : "tiled")));
                }
              }
            }
          }
        }
      }
    }
  }

  void halfConversionRoundsToNearestEvenOnEveryLevel() {
    std::vector<float> x = test::randomValues(1000, 17, 100.0f);
    x.push_back(65504.0f);
    x.push_back(65520.0f);            // the tie between the largest half and 2^16 goes to infinity
    x.push_back(1.0f + 1.0f / 2048);  // a tie between two halfs: to the even one (1.0)
    x.push_back(5.9604645e-08f);      // the smallest subnormal half
    x.push_back(-0.0f);
    x.push_back(std::numeric_limits<float>::infinity());
    const auto n = static_cast<int64_t>(x.size());
    std::vector<uint16_t> ref(x.size());
    for (size_t i = 0; i < x.size(); ++i) ref[i] = gguf::floatToHalf(x[i]);
    QCOMPARE(ref[1002], gguf::floatToHalf(1.0f));
    QCOMPARE(ref[1001], uint16_t{0x7c00});
    for (const KernelTable* k :
         {&referenceKernels(), kernelsFor(Isa::Avx2), kernelsFor(Isa::Avx512),
          kernelsFor(Isa::Neon), kernelsFor(Isa::NeonDot)}) {
      if (!k) continue;
      std::vector<uint16_t> got(x.size());
      k->floatToHalf(x.data(), got.data(), n);
      QCOMPARE(got, ref);
      std::vector<float> back(x.size());
      k->halfToFloat(got.data(), back.data(), n);
      for (size_t i = 0; i < x.size(); ++i) QCOMPARE(back[i], gguf::halfToFloat(ref[i]));
    }
  }
};

QTEST_GUILESS_MAIN(CpuVectorKernelsTest)
#include "test_cpu_vector_kernels.moc"
