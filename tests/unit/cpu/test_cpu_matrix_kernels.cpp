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
#include "gemm_level_cases.h"
#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/reference_kernels.h"
#include "kernels/cpu/row_groups.h"

using namespace shoal;
using namespace shoal::cpu;
using gguf::TensorType;

namespace {

using test::Problem;

void addTypeRows(bool withThreshold) {
  QTest::addColumn<int>("type");
  QTest::addColumn<int>("cols");
  if (withThreshold) QTest::addColumn<double>("maxNmse");
  for (const test::GemmCase& c : test::gemmCases()) {
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
    for (Isa isa : test::simdLevels()) {
      const std::string diff = test::gemmMismatch(t, cols, isa);
      if (!diff.empty()) QFAIL(diff.c_str());
    }
  }

  // MXFP4's E8M0 exponents across their range, the subnormal scales of e = 0 and 1 included
  // (the vectorized conversion in the AVX-512 kernels against gguf::e8m0Half): every level, every
  // order, in the file layout and in row groups.
  void mxfp4ExponentsAcrossTheirRangeMatchTheReference() {
    if (test::simdLevels().empty()) QSKIP("no SIMD level on this CPU");
    const uint8_t exponents[] = {0, 1, 2, 3, 64, 126, 127, 128, 190};
    for (int64_t tokens : {1, 3, 17}) {
      Problem p(TensorType::MXFP4, 24, 96, tokens, 7);
      size_t at = 0;
      for (size_t b = 0; b < p.weights.size(); b += sizeof(BlockMXFP4)) {
        p.weights[b] = exponents[at++ % std::size(exponents)];
      }
      Problem grouped = p;
      groupRows(WeightKind::MXFP4, grouped.weights.data(), p.rows, p.cols);
      for (DotOrder order : {DotOrder::Vec, DotOrder::Repacked}) {
        const std::vector<float> want = p.run(referenceKernels(), order, 0, p.rows);
        for (Isa isa : test::simdLevels()) {
          const KernelTable& k = *kernelsFor(isa);
          for (bool inGroups : {false, true}) {
            if (inGroups && !k.rowGroups[static_cast<int>(WeightKind::MXFP4)]) continue;
            const std::vector<float> got =
                (inGroups ? grouped : p).run(k, order, 0, p.rows, inGroups, true);
            QVERIFY2(test::firstBitDifference(got.data(), want.data(), want.size()) < 0,
                     qPrintable(QString("%1, %2 order, %3 tokens%4")
                                    .arg(isaName(isa).data())
                                    .arg(test::orderName(order))
                                    .arg(tokens)
                                    .arg(inGroups ? ", row groups" : "")));
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
    for (DotOrder order : test::ordersOf(t, cols)) {
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
    for (DotOrder order : test::ordersOf(t, cols)) {
      const double nmse = test::normalizedMse(p.run(referenceKernels(), order, 0, p.rows), truth);
      QVERIFY2(nmse <= 1e-6, qPrintable(QString("nmse %1").arg(nmse)));
    }
  }

  void simdConvertersMatchReferenceByteForByte() {
    for (Isa isa : test::simdLevels()) {
      const std::string diff = test::converterMismatch(isa);
      QVERIFY2(diff.empty(), diff.c_str());
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
         {&referenceKernels(), kernelsFor(Isa::Avx2), kernelsFor(Isa::Avx512),
          kernelsFor(Isa::Neon), kernelsFor(Isa::NeonDot)}) {
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
