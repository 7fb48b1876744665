// Matrix kernels and activation converters: every SIMD level computes bit for bit what the
// scalar reference computes (for every weight type, odd shapes, both dot orders, row ranges),
// and the reference itself is accurate against double-precision arithmetic.

#include <QtTest>
#include <cmath>
#include <vector>

#include "cpu_test_util.h"
#include "engine/error.h"
#include "engine/gguf/dequantize.h"
#include "engine/gguf/tensor_type.h"
#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/reference_kernels.h"

using namespace shoal;
using namespace shoal::cpu;
using gguf::TensorType;

namespace {

// A weight matrix and a batch of activations in the formats the kernels take.
struct Problem {
  TensorType type;
  int64_t rows, cols, tokens;
  std::vector<float> weightsF32, xF32;
  std::vector<uint8_t> weights, act;
  size_t weightRow = 0, actRow = 0;

  Problem(TensorType t, int64_t r, int64_t c, int64_t n, uint32_t seed, bool outliers = true)
      : type(t), rows(r), cols(c), tokens(n) {
    weightsF32 = test::randomValues(static_cast<size_t>(r * c), seed, 0.05f);
    xF32 = test::randomValues(static_cast<size_t>(n * c), seed + 1, 1.0f, outliers);
    weightRow = gguf::rowBytes(t, c);
    weights.assign(weightRow * static_cast<size_t>(r), 0);
    for (int64_t i = 0; i < r; ++i) {
      gguf::quantizeRow(t, &weightsF32[static_cast<size_t>(i * c)], &weights[weightRow * i], c);
    }
    const ActKind a = activationKind(weightKind(t));
    actRow = gguf::rowBytes(activationTensorType(a), c);
    act.assign(actRow * static_cast<size_t>(n), 0);
    for (int64_t i = 0; i < n; ++i) {
      referenceKernels().convert[static_cast<int>(a)](&xF32[static_cast<size_t>(i * c)],
                                                      &act[actRow * i], c);
    }
  }

  // y of rows [rowBegin, rowEnd) for every token; other entries stay NaN.
  std::vector<float> run(const KernelTable& k, DotOrder order, int64_t rowBegin,
                         int64_t rowEnd) const {
    std::vector<float> y(static_cast<size_t>(rows * tokens), NAN);
    GemmArgs g;
    g.weights = weights.data();
    g.weightStride = weightRow;
    g.act = act.data();
    g.actStride = actRow;
    g.tokens = tokens;
    g.cols = cols;
    g.y = y.data();
    g.ldy = rows;
    g.order = order;
    k.gemm[static_cast<int>(weightKind(type))](g, rowBegin, rowEnd);
    return y;
  }
};

bool tiledAllowed(TensorType t, int64_t cols) {
  if (t == TensorType::F32 || t == TensorType::F16) return cols % 16 == 0;
  if (t == TensorType::BF16) return cols % 32 == 0;
  return t == TensorType::Q4_K || t == TensorType::Q5_K || t == TensorType::Q6_K ||
         t == TensorType::Q2_K || t == TensorType::Q3_K || t == TensorType::IQ4_XS ||
         t == TensorType::IQ4_NL;
}

void addTypeRows(bool withThreshold) {
  QTest::addColumn<int>("type");
  QTest::addColumn<int>("cols");
  if (withThreshold) QTest::addColumn<double>("maxNmse");
  struct Case {
    TensorType type;
    std::vector<int> cols;
    double nmse;  // vs f32 activations: 1e-6 where they enter exactly, 5e-4 where quantized
  };
  const std::vector<Case> cases = {
      {TensorType::Q4_0, {32, 96, 576}, 5e-4},
      {TensorType::Q4_1, {32, 96, 576}, 5e-4},
      {TensorType::Q5_0, {32, 96, 576}, 5e-4},
      {TensorType::Q5_1, {32, 96, 576}, 5e-4},
      {TensorType::Q8_0, {32, 96, 576}, 5e-4},
      // 32 and 96: one and three blocks, the vec order's odd tail.
      {TensorType::IQ4_NL, {32, 96, 576}, 5e-4},
      {TensorType::MXFP4, {32, 96, 576}, 5e-4},
      {TensorType::Q4_K, {256, 512}, 5e-4},
      {TensorType::Q5_K, {256, 512}, 5e-4},
      {TensorType::Q6_K, {256, 512}, 5e-4},
      {TensorType::Q2_K, {256, 512}, 5e-4},
      {TensorType::Q3_K, {256, 512}, 5e-4},
      {TensorType::IQ4_XS, {256, 512}, 5e-4},
      {TensorType::F16, {16, 40, 64, 200, 576}, 1e-6},
      {TensorType::BF16, {16, 40, 64, 200, 576}, 5e-4},
      {TensorType::F32, {16, 40, 64, 200, 576}, 1e-6},
  };
  for (const Case& c : cases) {
    for (int cols : c.cols) {
      const std::string name = gguf::typeName(c.type) + "/" + std::to_string(cols);
      auto& row = QTest::newRow(name.c_str()) << static_cast<int>(c.type) << cols;
      if (withThreshold) row << c.nmse;
    }
  }
}

// sum_i dequant(w)[r][i] * x[t][i] in double, for every (token, row).
std::vector<double> exactProduct(const Problem& p, const std::vector<float>& x) {
  std::vector<float> w(static_cast<size_t>(p.cols));
  std::vector<double> y(static_cast<size_t>(p.rows * p.tokens));
  for (int64_t r = 0; r < p.rows; ++r) {
    gguf::dequantizeRow(p.type, &p.weights[p.weightRow * r], w.data(), p.cols);
    for (int64_t k = 0; k < p.tokens; ++k) {
      double s = 0;
      for (int64_t i = 0; i < p.cols; ++i) {
        s +=
            static_cast<double>(w[static_cast<size_t>(i)]) * x[static_cast<size_t>(k * p.cols + i)];
      }
      y[static_cast<size_t>(k * p.rows + r)] = s;
    }
  }
  return y;
}

// Values the converters must round as the reference does, in a row of 256 or more.
void plantConverterCases(std::vector<float>& x) {
  if (x.size() < 256) return;
  x[5] = 0.5f;  // exact ties after scaling appear in real data too
  // Q8_K's signed maximum: the first of equal magnitudes decides the sign of the scale.
  x[9] = -100.0f;
  x[200] = 100.0f;
  if (x.size() >= 512) std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // an all-zero block
}

}  // namespace

class CpuMatrixKernelsTest : public QObject {
  Q_OBJECT

 private slots:
  void simdGemmMatchesReferenceBitForBit_data() { addTypeRows(false); }
  void simdGemmMatchesReferenceBitForBit() {
    QFETCH(int, type);
    QFETCH(int, cols);
    const auto t = static_cast<TensorType>(type);
    if (test::simdLevels().empty()) QSKIP("no SIMD level on this CPU");
    uint32_t seed = 100;
    // Row counts around the tiles (4, 8 and 16 rows; pairs of rows), token counts around the
    // token tiles (4 and 8).
    for (int64_t rows : {1, 3, 8, 13, 37}) {
      for (int64_t tokens : {1, 2, 3, 5, 7, 9, 17}) {
        const Problem p(t, rows, cols, tokens, seed++);
        std::vector<DotOrder> orders = {DotOrder::Vec};
        if (tiledAllowed(t, cols)) orders.push_back(DotOrder::Tiled);
        for (DotOrder order : orders) {
          for (auto [b, e] : {std::pair<int64_t, int64_t>{0, rows}, {rows / 2, rows}}) {
            if (b == e) continue;
            const auto ref = p.run(referenceKernels(), order, b, e);
            for (Isa isa : test::simdLevels()) {
              const auto got = p.run(*kernelsFor(isa), order, b, e);
              const int64_t diff = test::firstBitDifference(got.data(), ref.data(), ref.size());
              if (diff >= 0) {
                QFAIL(qPrintable(
                    QString("%1: rows %2 tokens %3 range [%4,%5) order %6: y[%7] = "
                            "%8, reference %9")
                        .arg(QString::fromStdString(std::string(isaName(isa))))
                        .arg(rows)
                        .arg(tokens)
                        .arg(b)
                        .arg(e)
                        .arg(order == DotOrder::Vec ? "vec" : "tiled")
                        .arg(diff)
                        .arg(static_cast<double>(got[static_cast<size_t>(diff)]), 0, 'g', 9)
                        .arg(static_cast<double>(ref[static_cast<size_t>(diff)]), 0, 'g', 9)));
              }
            }
          }
        }
      }
    }
  }

  // Against the dequantized weights times the f32 activations (outlier-free, so that one
  // 256-wide Q8_K scale does not dominate): only the activation conversion is lost.
  void referenceGemmIsAccurate_data() { addTypeRows(true); }
  void referenceGemmIsAccurate() {
    QFETCH(int, type);
    QFETCH(int, cols);
    QFETCH(double, maxNmse);
    const auto t = static_cast<TensorType>(type);
    const Problem p(t, 7, cols, 3, 7, false);
    const auto truth = exactProduct(p, p.xF32);
    for (DotOrder order : {DotOrder::Vec, DotOrder::Tiled}) {
      if (order == DotOrder::Tiled && !tiledAllowed(t, cols)) continue;
      const double nmse = test::normalizedMse(p.run(referenceKernels(), order, 0, p.rows), truth);
      QVERIFY2(nmse <= maxNmse, qPrintable(QString("nmse %1 > %2").arg(nmse).arg(maxNmse)));
    }
  }

  // Against the dequantized weights times the converted (dequantized) activations: the dot
  // products themselves lose only float rounding.
  void referenceGemmIsExactUpToRounding_data() { addTypeRows(false); }
  void referenceGemmIsExactUpToRounding() {
    QFETCH(int, type);
    QFETCH(int, cols);
    const auto t = static_cast<TensorType>(type);
    const Problem p(t, 7, cols, 3, 8);
    const TensorType actType = activationTensorType(activationKind(weightKind(t)));
    std::vector<float> xq(p.xF32.size());
    for (int64_t k = 0; k < p.tokens; ++k) {
      gguf::dequantizeRow(actType, &p.act[p.actRow * k], &xq[static_cast<size_t>(k * cols)], cols);
    }
    const auto truth = exactProduct(p, xq);
    for (DotOrder order : {DotOrder::Vec, DotOrder::Tiled}) {
      if (order == DotOrder::Tiled && !tiledAllowed(t, cols)) continue;
      const double nmse = test::normalizedMse(p.run(referenceKernels(), order, 0, p.rows), truth);
      QVERIFY2(nmse <= 1e-6, qPrintable(QString("nmse %1").arg(nmse)));
    }
  }

  void simdConvertersMatchReferenceByteForByte() {
    for (Isa isa : test::simdLevels()) {
      const KernelTable& k = *kernelsFor(isa);
      for (int a = 0; a < static_cast<int>(ActKind::Count); ++a) {
        const auto kind = static_cast<ActKind>(a);
        const TensorType type = activationTensorType(kind);
        for (int64_t n : {256, 512, 2048}) {
          auto x = test::randomValues(static_cast<size_t>(n), static_cast<uint32_t>(n + a), 3.0f);
          plantConverterCases(x);
          std::vector<uint8_t> ref(gguf::rowBytes(type, n), 0xAA), got(ref.size(), 0x55);
          referenceKernels().convert[a](x.data(), ref.data(), n);
          k.convert[a](x.data(), got.data(), n);
          QVERIFY2(ref == got,
                   qPrintable(QString("%1 %2 n=%3")
                                  .arg(QString::fromStdString(std::string(isaName(isa))))
                                  .arg(QString::fromStdString(gguf::typeName(type)))
                                  .arg(n)));
        }
      }
    }
  }

  // ggml's x86 Q8_0/Q8_1 quantizer: inverse scale 127/amax and ties to even (the reference
  // quantizer of the file format, engine/gguf, rounds ties away from zero).
  void activationQuantizerRoundsTiesToEven() {
    std::vector<float> x(32, 0.0f);
    x[0] = 127.0f;  // amax 127: d = 1, inverse scale exactly 1
    x[1] = 2.5f;
    x[2] = 3.5f;
    x[3] = -2.5f;
    x[4] = -0.5f;
    for (const KernelTable* k :
         {&referenceKernels(), kernelsFor(Isa::Avx2), kernelsFor(Isa::Avx512)}) {
      if (!k) continue;
      BlockQ8_1 b{};
      k->convert[static_cast<int>(ActKind::Q8_1)](x.data(), &b, 32);
      QCOMPARE(static_cast<int>(b.qs[1]), 2);
      QCOMPARE(static_cast<int>(b.qs[2]), 4);
      QCOMPARE(static_cast<int>(b.qs[3]), -2);
      QCOMPARE(static_cast<int>(b.qs[4]), 0);
      QCOMPARE(gguf::halfToFloat(b.d), 1.0f);
      QCOMPARE(gguf::halfToFloat(b.s), 127.0f + 2 + 4 - 2);  // d * sum of the quants
    }
  }

  void weightKindsPairWithGgmlActivationFormats() {
    QCOMPARE(activationKind(weightKind(TensorType::Q4_0)), ActKind::Q8_0);
    QCOMPARE(activationKind(weightKind(TensorType::Q5_0)), ActKind::Q8_0);
    QCOMPARE(activationKind(weightKind(TensorType::Q8_0)), ActKind::Q8_0);
    QCOMPARE(activationKind(weightKind(TensorType::Q4_1)), ActKind::Q8_1);
    QCOMPARE(activationKind(weightKind(TensorType::Q5_1)), ActKind::Q8_1);
    QCOMPARE(activationKind(weightKind(TensorType::Q4_K)), ActKind::Q8_K);
    QCOMPARE(activationKind(weightKind(TensorType::Q6_K)), ActKind::Q8_K);
    QCOMPARE(activationKind(weightKind(TensorType::F16)), ActKind::F16);
    QCOMPARE(activationKind(weightKind(TensorType::BF16)), ActKind::BF16);
    QCOMPARE(activationKind(weightKind(TensorType::F32)), ActKind::F32);
    QCOMPARE(activationKind(weightKind(TensorType::IQ4_NL)), ActKind::Q8_0);
    QCOMPARE(activationKind(weightKind(TensorType::MXFP4)), ActKind::Q8_0);
    QCOMPARE(activationKind(weightKind(TensorType::IQ4_XS)), ActKind::Q8_K);
    QCOMPARE(activationKind(weightKind(TensorType::Q3_K)), ActKind::Q8_K);
    QVERIFY_THROWS_EXCEPTION(shoal::Error, weightKind(TensorType::IQ3_S));
  }
};

QTEST_GUILESS_MAIN(CpuMatrixKernelsTest)
#include "test_cpu_matrix_kernels.moc"
