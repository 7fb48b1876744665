// The CUDA kernels' block decoders (kernels/cuda/block_math.cuh) built for the host, held to the
// engine's reference on every weight type the CUDA backend handles, without a GPU:
//  - the dequantizer gives dequantizeRow's floats bit for bit, and their f16 rounding;
//  - the int8 sub-block dot product (the decode mat-vec's) equals a double-precision dot of the
//    dequantized row with the dequantized int8 activations, to 1e-5 of the sum of |w x|.
// Rows come from the engine's quantizers (realistic fields) and from random bytes with sane scales
// (every bit pattern of quants and sub-scales). No CUDA API is called: the static CUDA runtime
// linked in never looks for a driver.

#include <QtTest>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "engine/error.h"
#include "engine/gguf/dequantize.h"
#include "engine/gguf/tensor_type.h"
#include "kernels/cuda/block_math_host.h"
#include "kernels/cuda/cuda_kernels.h"

using namespace shoal;
using gguf::TensorType;

namespace {

// Every type the CUDA backend is meant to handle (weightTypeSupported).
const std::vector<TensorType> kCudaTypes = {
    TensorType::F32,  TensorType::F16,    TensorType::BF16,   TensorType::Q4_0,
    TensorType::Q4_1, TensorType::Q5_0,   TensorType::Q5_1,   TensorType::Q8_0,
    TensorType::Q2_K, TensorType::Q3_K,   TensorType::Q4_K,   TensorType::Q5_K,
    TensorType::Q6_K, TensorType::IQ4_NL, TensorType::IQ4_XS, TensorType::MXFP4};

constexpr int kRowsPerSource = 4;

// Row length: four super-blocks of the 256-element formats; 33 blocks of the others, so MXFP4's
// 17-byte blocks start rows at odd offsets too.
int64_t rowLength(TensorType t) { return gguf::typeTraits(t).blockSize == 256 ? 1024 : 1056; }

// Rows of random floats through the engine's quantizer: centred, offset (the minimums), tiny
// with zero blocks (f16 subnormals, d = 0), and heavy-tailed (wide dynamic range).
std::vector<uint8_t> quantizedRows(TensorType t, int64_t n, std::mt19937& rng) {
  const size_t rb = gguf::rowBytes(t, n);
  std::vector<uint8_t> rows(rb * kRowsPerSource);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int r = 0; r < kRowsPerSource; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const float g = normal(rng);
      switch (r) {
        case 0:
          x[i] = g;
          break;
        case 1:
          x[i] = 0.5f + 0.2f * g;
          break;
        case 2:
          x[i] = (i / 64) % 3 == 0 ? 0.0f : 1e-4f * g;
          break;
        default:
          x[i] = g * std::exp(2.0f * normal(rng));
      }
    }
    gguf::quantizeRow(t, x.data(), rows.data() + rb * r, n);
  }
  return rows;
}

// Offsets of the f16 scale fields in a block (ggml-common.h block_*), which random bytes must
// not make NaN or infinite; MXFP4's E8M0 byte is bounded separately. Empty for other types.
std::vector<int> halfFields(TensorType t) {
  switch (t) {
    case TensorType::Q4_0:
    case TensorType::Q5_0:
    case TensorType::Q8_0:
    case TensorType::IQ4_NL:
    case TensorType::IQ4_XS:
      return {0};
    case TensorType::Q4_1:
    case TensorType::Q5_1:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
      return {0, 2};
    case TensorType::Q2_K:
      return {80, 82};
    case TensorType::Q3_K:
      return {108};
    case TensorType::Q6_K:
      return {208};
    default:
      return {};
  }
}

// Rows of random bytes whose scales are finite halves of either sign (0.001..0.1), and MXFP4
// exponents within 2^-20..2^20 so products stay finite, but for a few of the smallest.
std::vector<uint8_t> randomByteRows(TensorType t, int64_t n, std::mt19937& rng) {
  const gguf::TypeTraits traits = gguf::typeTraits(t);
  const size_t rb = gguf::rowBytes(t, n);
  std::vector<uint8_t> rows(rb * kRowsPerSource);
  std::uniform_int_distribution<int> byte(0, 255), exponent(107, 147);
  std::uniform_real_distribution<float> scale(0.001f, 0.1f);
  for (uint8_t& b : rows) b = static_cast<uint8_t>(byte(rng));
  const int64_t blocks = static_cast<int64_t>(rows.size() / traits.typeSize);
  for (int64_t i = 0; i < blocks; ++i) {
    uint8_t* block = rows.data() + i * static_cast<int64_t>(traits.typeSize);
    for (int offset : halfFields(t)) {
      const uint16_t h = gguf::floatToHalf(byte(rng) & 1 ? scale(rng) : -scale(rng));
      std::memcpy(block + offset, &h, sizeof h);
    }
    // Every eighth block gets one of the smallest scales (2^-128 and 2^-127 are subnormal).
    if (t == TensorType::MXFP4) block[0] = static_cast<uint8_t>(i % 8 ? exponent(rng) : i / 8 % 4);
  }
  return rows;
}

// Activations quantized as activation_quant.cu does: per 32 values d = max|x| / 127,
// q = round-to-nearest-even(x / d) (0 when d is 0), and d * sum(q) in float.
struct QuantizedActivations {
  std::vector<int8_t> q;
  std::vector<float> d, dSum;
};

QuantizedActivations quantizeActivations(const std::vector<float>& x) {
  QuantizedActivations a;
  a.q.resize(x.size());
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0.0f;
    for (size_t l = 0; l < 32; ++l) amax = std::fmax(amax, std::fabs(x[32 * b + l]));
    const float d = amax / 127.0f;
    int sum = 0;
    for (size_t l = 0; l < 32; ++l) {
      const int q = d == 0.0f ? 0 : static_cast<int>(std::nearbyint(x[32 * b + l] / d));
      a.q[32 * b + l] = static_cast<int8_t>(q);
      sum += q;
    }
    a.d.push_back(d);
    a.dSum.push_back(d * static_cast<float>(sum));
  }
  return a;
}

// Activations with a zero block and blocks of very different magnitudes.
std::vector<float> randomActivations(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t block = i / 32;
    x[i] = block == 1 ? 0.0f : normal(rng) * std::pow(4.0f, static_cast<float>(block % 5) - 2.0f);
  }
  return x;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// All rows of a type: the quantizer's, then random bytes (quantized formats only).
std::vector<uint8_t> testRows(TensorType t, int64_t n, int& rowCount) {
  std::mt19937 rng(1234 + static_cast<unsigned>(t));
  std::vector<uint8_t> rows = quantizedRows(t, n, rng);
  if (!halfFields(t).empty() || t == TensorType::MXFP4) {
    const std::vector<uint8_t> more = randomByteRows(t, n, rng);
    rows.insert(rows.end(), more.begin(), more.end());
  }
  rowCount = static_cast<int>(rows.size() / gguf::rowBytes(t, n));
  return rows;
}

void addTypeRows(bool quantizedOnly) {
  QTest::addColumn<int>("type");
  for (TensorType t : kCudaTypes) {
    if (quantizedOnly && !cuda::hostHasSubBlockDot(t)) continue;
    QTest::newRow(gguf::typeName(t).c_str()) << static_cast<int>(t);
  }
}

}  // namespace

class TestCudaBlockMath : public QObject {
  Q_OBJECT
 private slots:
  // The kernels' type table agrees with the GGUF traits, and names exactly kCudaTypes.
  void typeTableMatchesGguf() {
    int supported = 0;
    for (uint32_t raw = 0; raw < 64; ++raw) {
      const std::optional<gguf::TypeTraits> traits = gguf::typeTraits(raw);
      if (!traits) continue;
      const auto t = static_cast<TensorType>(raw);
      const bool listed = std::find(kCudaTypes.begin(), kCudaTypes.end(), t) != kCudaTypes.end();
      QVERIFY2(cuda::weightTypeSupported(t) == listed, traits->name.data());
      if (!listed) continue;
      ++supported;
      QCOMPARE(cuda::typeBlockBytes(t), static_cast<int64_t>(traits->typeSize));
      QCOMPARE(cuda::typeBlockElements(t), traits->blockSize);
      QCOMPARE(cuda::hostHasSubBlockDot(t), traits->blockSize > 1);
    }
    QCOMPARE(supported, static_cast<int>(kCudaTypes.size()));
  }

  void dequantMatchesReference_data() { addTypeRows(false); }
  void dequantMatchesReference() {
    QFETCH(int, type);
    const auto t = static_cast<TensorType>(type);
    const int64_t n = rowLength(t);
    const size_t rb = gguf::rowBytes(t, n);
    int rowCount = 0;
    const std::vector<uint8_t> rows = testRows(t, n, rowCount);
    std::vector<float> want(static_cast<size_t>(n));
    float got[32];
    uint16_t gotHalf[32];
    for (int r = 0; r < rowCount; ++r) {
      const uint8_t* row = rows.data() + rb * static_cast<size_t>(r);
      gguf::dequantizeRow(t, row, want.data(), n);
      for (int64_t s = 0; s < n / 32; ++s) {
        cuda::hostDequantSubBlock(t, row, s, got);
        cuda::hostDequantSubBlockHalf(t, row, s, gotHalf);
        for (int l = 0; l < 32; ++l) {
          const float w = want[32 * s + l];
          if (bits(got[l]) != bits(w) || gotHalf[l] != gguf::floatToHalf(w)) {
            QFAIL(qPrintable(QString("row %1 element %2: got %3 (f16 0x%4), want %5 (f16 0x%6)")
                                 .arg(r)
                                 .arg(32 * s + l)
                                 .arg(double(got[l]), 0, 'g', 9)
                                 .arg(gotHalf[l], 0, 16)
                                 .arg(double(w), 0, 'g', 9)
                                 .arg(gguf::floatToHalf(w), 0, 16)));
          }
        }
      }
    }
  }

  void subBlockDotMatchesDoubleDot_data() { addTypeRows(true); }
  void subBlockDotMatchesDoubleDot() {
    QFETCH(int, type);
    const auto t = static_cast<TensorType>(type);
    const int64_t n = rowLength(t);
    const size_t rb = gguf::rowBytes(t, n);
    int rowCount = 0;
    const std::vector<uint8_t> rows = testRows(t, n, rowCount);
    std::mt19937 rng(99);
    std::vector<float> w(static_cast<size_t>(n));
    constexpr double kTolerance = 1e-5;  // of the sum of |w x|: a few float roundings
    double worst = 0;
    int nonzeroRows = 0;
    for (int r = 0; r < rowCount; ++r) {
      const uint8_t* row = rows.data() + rb * static_cast<size_t>(r);
      gguf::dequantizeRow(t, row, w.data(), n);
      const QuantizedActivations a = quantizeActivations(randomActivations(n, rng));
      double rowGot = 0, rowWant = 0, rowMagnitude = 0;
      for (int64_t s = 0; s < n / 32; ++s) {
        const double got = cuda::hostSubBlockDot(t, row, s, &a.q[32 * s], a.d[s], a.dSum[s]);
        double want = 0, magnitude = 0;
        for (int64_t l = 32 * s; l < 32 * s + 32; ++l) {
          const double p = double(w[l]) * (double(a.q[l]) * double(a.d[s]));
          want += p;
          magnitude += std::fabs(p);
        }
        const double error = std::fabs(got - want);
        if (magnitude > 0) worst = std::max(worst, error / magnitude);
        if (!(error <= kTolerance * magnitude + 1e-30)) {
          QFAIL(qPrintable(QString("row %1 sub-block %2: got %3, want %4 (sum |w x| %5)")
                               .arg(r)
                               .arg(s)
                               .arg(got, 0, 'g', 9)
                               .arg(want, 0, 'g', 9)
                               .arg(magnitude, 0, 'g', 9)));
        }
        rowGot += got;
        rowWant += want;
        rowMagnitude += magnitude;
      }
      if (rowMagnitude > 0) ++nonzeroRows;
      QVERIFY2(std::fabs(rowGot - rowWant) <= kTolerance * rowMagnitude,
               qPrintable(QString("row %1: got %2, want %3").arg(r).arg(rowGot).arg(rowWant)));
    }
    // Only the tiny row may decode to zeros (a scale below f16's range).
    QVERIFY(nonzeroRows >= rowCount - 1);
    qInfo("%s: worst sub-block error %.3g of sum |w x|", gguf::typeName(t).c_str(), worst);
  }

  // The float types have no int8 product: the mat-vec reads them against float activations.
  void floatTypesRefuseTheInt8Dot() {
    const int8_t q[32] = {};
    const uint8_t row[128] = {};
    for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16}) {
      bool threw = false;
      try {
        cuda::hostSubBlockDot(t, row, 0, q, 1.0f, 0.0f);
      } catch (const Error&) {
        threw = true;
      }
      QVERIFY(threw);
    }
  }
};

QTEST_GUILESS_MAIN(TestCudaBlockMath)
#include "test_cuda_block_math.moc"
