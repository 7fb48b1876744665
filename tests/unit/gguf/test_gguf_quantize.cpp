// Quantizers: quantize -> dequantize stays within a per-type error bound, and the bytes equal
// what ggml's reference quantizers (quantize_row_*_ref) produce for the same input, recorded as
// FNV-1a hashes. tools/llamacpp/quant_hashes.sh prints them from the pinned llama.cpp's ggml
// (commit 0c1e570; the first 14 were first taken from ggml commit d99724f and are unchanged).

#include <QtTest>
#include <cmath>
#include <vector>

#include "engine/error.h"
#include "engine/gguf/dequantize.h"
#include "tests/unit/gguf/quantizer_test_row.h"

using namespace shoal;
using namespace shoal::gguf;

namespace {

constexpr int64_t kN = quant_test::kRowLength;
using quant_test::fnv1a;

std::vector<float> testInput() { return quant_test::testRow(); }

std::vector<uint8_t> quantize(TensorType type, const std::vector<float>& x) {
  std::vector<uint8_t> out(rowBytes(type, static_cast<int64_t>(x.size())), 0xAA);
  quantizeRow(type, x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

}  // namespace

class GgufQuantizeTest : public QObject {
  Q_OBJECT

 private slots:
  void roundTripErrorIsBounded_data() {
    QTest::addColumn<int>("type");
    QTest::addColumn<double>("maxRelativeRmse");
    // Relative RMSE over testInput(); bounds are ~1.5x what the formats achieve on it.
    QTest::newRow("f16") << int(TensorType::F16) << 3e-4;
    QTest::newRow("bf16") << int(TensorType::BF16) << 2.5e-3;
    QTest::newRow("q8_0") << int(TensorType::Q8_0) << 0.01;
    QTest::newRow("q8_1") << int(TensorType::Q8_1) << 0.01;
    QTest::newRow("q8_K") << int(TensorType::Q8_K) << 0.025;
    QTest::newRow("q6_K") << int(TensorType::Q6_K) << 0.03;
    QTest::newRow("q5_0") << int(TensorType::Q5_0) << 0.08;
    QTest::newRow("q5_1") << int(TensorType::Q5_1) << 0.05;
    QTest::newRow("q5_K") << int(TensorType::Q5_K) << 0.055;
    QTest::newRow("q4_0") << int(TensorType::Q4_0) << 0.15;
    QTest::newRow("iq4_nl") << int(TensorType::IQ4_NL) << 0.15;
    QTest::newRow("mxfp4") << int(TensorType::MXFP4) << 0.3;
    QTest::newRow("iq4_xs") << int(TensorType::IQ4_XS) << 0.15;
    QTest::newRow("q4_1") << int(TensorType::Q4_1) << 0.11;
    QTest::newRow("q4_K") << int(TensorType::Q4_K) << 0.1;
    QTest::newRow("q3_K") << int(TensorType::Q3_K) << 0.26;
    QTest::newRow("q2_K") << int(TensorType::Q2_K) << 0.4;
  }

  void roundTripErrorIsBounded() {
    QFETCH(int, type);
    QFETCH(double, maxRelativeRmse);
    const auto t = static_cast<TensorType>(type);
    const std::vector<float> x = testInput();
    const std::vector<uint8_t> q = quantize(t, x);
    std::vector<float> y(x.size());
    dequantizeRow(t, q.data(), y.data(), kN);
    double err = 0, sig = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
      sig += double(x[i]) * x[i];
      if (x[i] == 0.0f && i / 256 == 3) QCOMPARE(y[i], 0.0f);  // zero blocks stay zero
    }
    const double rel = std::sqrt(err / sig);
    QVERIFY2(rel < maxRelativeRmse, qPrintable(QString("relative RMSE %1").arg(rel)));
  }

  void bytesMatchGgmlReference_data() {
    QTest::addColumn<int>("type");
    QTest::addColumn<quint64>("hash");
    QTest::newRow("q4_0") << int(TensorType::Q4_0) << quint64(0x4928402225c6704dull);
    QTest::newRow("q4_1") << int(TensorType::Q4_1) << quint64(0xe24ade1074f85bcaull);
    QTest::newRow("q5_0") << int(TensorType::Q5_0) << quint64(0xfe08a6ce30f3cb3full);
    QTest::newRow("q5_1") << int(TensorType::Q5_1) << quint64(0xb165005ed50ccfe9ull);
    QTest::newRow("q8_0") << int(TensorType::Q8_0) << quint64(0xd88578995d30c8c4ull);
    QTest::newRow("q8_1") << int(TensorType::Q8_1) << quint64(0x19953833cf0b866bull);
    QTest::newRow("q2_K") << int(TensorType::Q2_K) << quint64(0x7c9577bf192b20a6ull);
    QTest::newRow("q3_K") << int(TensorType::Q3_K) << quint64(0x8d275f39ed7cade7ull);
    QTest::newRow("q4_K") << int(TensorType::Q4_K) << quint64(0x85f1278b6f3e4475ull);
    QTest::newRow("q5_K") << int(TensorType::Q5_K) << quint64(0xb75a1d828258af52ull);
    QTest::newRow("q6_K") << int(TensorType::Q6_K) << quint64(0x2245ba698340228dull);
    QTest::newRow("q8_K") << int(TensorType::Q8_K) << quint64(0x4d885d441fa3b21eull);
    QTest::newRow("f16") << int(TensorType::F16) << quint64(0x1968278af52dc637ull);
    QTest::newRow("bf16") << int(TensorType::BF16) << quint64(0x09def07ab187e32eull);
    QTest::newRow("iq4_nl") << int(TensorType::IQ4_NL) << quint64(0xdc2b43006697e63eull);
    QTest::newRow("iq4_xs") << int(TensorType::IQ4_XS) << quint64(0xb8e556f30aabae2bull);
    QTest::newRow("mxfp4") << int(TensorType::MXFP4) << quint64(0xcad320c9a6b7f801ull);
  }

  void bytesMatchGgmlReference() {
    QFETCH(int, type);
    QFETCH(quint64, hash);
    const std::vector<uint8_t> q = quantize(static_cast<TensorType>(type), testInput());
    QCOMPARE(quint64(fnv1a(q)), hash);
  }

  void q8_1SumFieldIsScaleTimesSumOfQuants() {
    const std::vector<float> x = testInput();
    const std::vector<uint8_t> q = quantize(TensorType::Q8_1, x);
    for (size_t blk = 0; blk < q.size() / 36; ++blk) {
      const uint8_t* b = q.data() + 36 * blk;
      uint16_t d, s;
      std::memcpy(&d, b, 2);
      std::memcpy(&s, b + 2, 2);
      int sum = 0;
      for (int j = 0; j < 32; ++j) sum += static_cast<int8_t>(b[4 + j]);
      // s is rounded from d * sum with d still in f32, so compare within half precision.
      const float want = static_cast<float>(sum) * halfToFloat(d);
      QVERIFY(std::fabs(halfToFloat(s) - want) <= std::fabs(want) * 1e-3f + 1e-7f);
    }
  }

  void q8_KBlockSumsAreSumsOfSixteenQuants() {
    const std::vector<uint8_t> q = quantize(TensorType::Q8_K, testInput());
    for (size_t blk = 0; blk < q.size() / 292; ++blk) {
      const uint8_t* b = q.data() + 292 * blk;
      for (int g = 0; g < 16; ++g) {
        int sum = 0;
        for (int j = 0; j < 16; ++j) sum += static_cast<int8_t>(b[4 + 16 * g + j]);
        int16_t stored;
        std::memcpy(&stored, b + 260 + 2 * g, 2);
        QCOMPARE(int(stored), sum);
      }
    }
  }

  void unsupportedTypesThrow() {
    std::vector<float> x(256);
    std::vector<uint8_t> out(1024);
    QVERIFY_THROWS_EXCEPTION(shoal::Error,
                             quantizeRow(TensorType::IQ3_S, x.data(), out.data(), 256));
    QVERIFY_THROWS_EXCEPTION(shoal::Error, quantizeRow(TensorType::Q4_K, x.data(), out.data(), 32));
  }
};

QTEST_GUILESS_MAIN(GgufQuantizeTest)
#include "test_gguf_quantize.moc"
