// Dequantization of hand-built blocks. Each test writes the block bytes field by field from the
// layout in ggml-common.h and computes the expected floats element by element from the
// definition of the format (written here independently of engine/gguf/dequantize.cpp).

#include <QtTest>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/error.h"
#include "engine/gguf/dequantize.h"

using namespace shoal::gguf;

namespace {

constexpr uint16_t kHalfOne = 0x3C00;      // 1.0
constexpr uint16_t kHalfHalf = 0x3800;     // 0.5
constexpr uint16_t kHalfQuarter = 0x3400;  // 0.25
constexpr uint16_t kHalfMinus2 = 0xC000;   // -2.0

void putU16(std::vector<uint8_t>& b, size_t at, uint16_t v) { std::memcpy(&b[at], &v, 2); }

// A deterministic byte pattern that exercises every nibble and bit position.
uint8_t pattern(size_t i) { return static_cast<uint8_t>((i * 37 + 11) & 0xff); }

std::vector<float> decode(TensorType type, const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n), -12345.f);
  dequantizeRow(type, bytes.data(), out.data(), n);
  return out;
}

void compareAll(const std::vector<float>& got, const std::vector<float>& want) {
  QCOMPARE(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) {
      QFAIL(qPrintable(QString("element %1: got %2, want %3").arg(i).arg(got[i]).arg(want[i])));
    }
  }
}

// 6-bit scales/mins of the 8 sub-blocks of a Q4_K/Q5_K block, packed into 12 bytes.
const int kSc[8] = {1, 2, 3, 4, 17, 33, 50, 63};
const int kMin[8] = {0, 1, 2, 3, 20, 40, 60, 63};
void packKScales(std::vector<uint8_t>& b, size_t at) {
  for (int j = 0; j < 4; ++j) {
    b[at + j] = static_cast<uint8_t>(kSc[j] | ((kSc[j + 4] >> 4) << 6));
    b[at + j + 4] = static_cast<uint8_t>(kMin[j] | ((kMin[j + 4] >> 4) << 6));
    b[at + j + 8] = static_cast<uint8_t>((kSc[j + 4] & 0xf) | ((kMin[j + 4] & 0xf) << 4));
  }
}

}  // namespace

class GgufDequantizeTest : public QObject {
  Q_OBJECT

 private slots:
  void halfConversionHandlesSpecialValues() {
    QCOMPARE(halfToFloat(0x3C00), 1.0f);
    QCOMPARE(halfToFloat(0xC000), -2.0f);
    QCOMPARE(halfToFloat(0x7BFF), 65504.0f);
    QCOMPARE(halfToFloat(0x0001), 5.9604644775390625e-8f);  // smallest subnormal
    QVERIFY(std::isinf(halfToFloat(0x7C00)));
    QVERIFY(std::isnan(halfToFloat(0x7E00)));
    QCOMPARE(floatToHalf(1.0f), uint16_t{0x3C00});
    QCOMPARE(floatToHalf(65520.0f), uint16_t{0x7C00});  // ties to even: overflows to inf
    QCOMPARE(floatToHalf(65519.0f), uint16_t{0x7BFF});
    QCOMPARE(floatToHalf(1.0f + 1.0f / 2048), uint16_t{0x3C00});  // tie, even mantissa stays
    QCOMPARE(floatToHalf(1.0f + 3.0f / 2048), uint16_t{0x3C02});  // tie, odd mantissa rounds up
    QCOMPARE(floatToHalf(2.98023223876953125e-8f), uint16_t{0});  // 2^-25: tie to zero
    QCOMPARE(floatToHalf(-0.0f), uint16_t{0x8000});
    for (uint32_t h = 0; h < 0x7C00; ++h) {  // every finite positive half survives a round trip
      QCOMPARE(floatToHalf(halfToFloat(static_cast<uint16_t>(h))), static_cast<uint16_t>(h));
    }
  }

  void bf16ConversionRoundsToNearestEven() {
    QCOMPARE(bf16ToFloat(0x3F80), 1.0f);
    QCOMPARE(floatToBf16(1.0f), uint16_t{0x3F80});
    uint32_t bits = 0x3F808000;  // halfway between 0x3F80 and 0x3F81: stays even
    float f;
    std::memcpy(&f, &bits, 4);
    QCOMPARE(floatToBf16(f), uint16_t{0x3F80});
    bits = 0x3F818000;  // halfway, odd: rounds up
    std::memcpy(&f, &bits, 4);
    QCOMPARE(floatToBf16(f), uint16_t{0x3F82});
    QVERIFY(std::isnan(bf16ToFloat(floatToBf16(std::nanf("")))));
  }

  void f32IsCopied() {
    const std::vector<float> values = {1.5f, -2.25f, 0.f, 1e-30f};
    std::vector<uint8_t> b(16);
    std::memcpy(b.data(), values.data(), 16);
    compareAll(decode(TensorType::F32, b, 4), values);
  }

  void f16AndBf16Decode() {
    std::vector<uint8_t> h(6);
    putU16(h, 0, kHalfOne);
    putU16(h, 2, kHalfMinus2);
    putU16(h, 4, kHalfQuarter);
    compareAll(decode(TensorType::F16, h, 3), {1.0f, -2.0f, 0.25f});
    std::vector<uint8_t> b(4);
    putU16(b, 0, 0x4040);  // 3.0
    putU16(b, 2, 0xBF00);  // -0.5
    compareAll(decode(TensorType::BF16, b, 2), {3.0f, -0.5f});
  }

  void q8_0IsScaleTimesSignedByte() {
    std::vector<uint8_t> b(34 * 2);
    for (int blk = 0; blk < 2; ++blk) {
      putU16(b, 34 * blk, blk == 0 ? kHalfHalf : kHalfMinus2);
      for (int j = 0; j < 32; ++j) b[34 * blk + 2 + j] = pattern(32 * blk + j);
    }
    std::vector<float> want(64);
    for (int i = 0; i < 64; ++i) {
      want[i] = static_cast<float>(static_cast<int8_t>(pattern(i))) * (i < 32 ? 0.5f : -2.0f);
    }
    compareAll(decode(TensorType::Q8_0, b, 64), want);
  }

  void q8_1IgnoresTheSumField() {
    std::vector<uint8_t> b(36);
    putU16(b, 0, kHalfQuarter);
    putU16(b, 2, 0x7BFF);  // s: irrelevant to the values
    for (int j = 0; j < 32; ++j) b[4 + j] = pattern(j);
    std::vector<float> want(32);
    for (int i = 0; i < 32; ++i) want[i] = static_cast<float>(static_cast<int8_t>(pattern(i))) / 4;
    compareAll(decode(TensorType::Q8_1, b, 32), want);
  }

  void q4_0LowNibblesFirstThenHighNibbles() {
    std::vector<uint8_t> b(18);
    putU16(b, 0, kHalfHalf);
    for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    std::vector<float> want(32);
    for (int i = 0; i < 16; ++i) want[i] = (i - 8) * 0.5f;
    for (int i = 16; i < 32; ++i) want[i] = ((15 - (i - 16)) - 8) * 0.5f;
    compareAll(decode(TensorType::Q4_0, b, 32), want);
  }

  // E2M1 levels (0, 0.5, 1, 1.5, 2, 3, 4, 6, then the negatives) times 2^(e - 127).
  void mxfp4IsE2M1LevelTimesPowerOfTwo() {
    const float levels[16] = {0,     0.5f,  1,  1.5f,  2,  3,  4,  6,
                              -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    const uint8_t exponents[3] = {127, 130, 0};  // 2^0, 2^3, 2^-127 (a subnormal scale)
    std::vector<uint8_t> b(17 * 3);
    std::vector<float> want(96);
    for (int blk = 0; blk < 3; ++blk) {
      b[17 * blk] = exponents[blk];
      for (int j = 0; j < 16; ++j) b[17 * blk + 1 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
      const float scale = std::ldexp(1.0f, static_cast<int>(exponents[blk]) - 127);
      for (int i = 0; i < 16; ++i) {
        want[32 * blk + i] = levels[i] * scale;
        want[32 * blk + 16 + i] = levels[15 - i] * scale;
      }
    }
    compareAll(decode(TensorType::MXFP4, b, 96), want);
  }

  // IQ4_XS: d * (6-bit scale - 32) * IQ4_NL level, the scale's low 4 bits in scales_l's
  // nibbles and its top 2 bits in scales_h.
  void iq4_xsScalesEachSubBlockOfTheLevelTable() {
    const int levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                            1,    13,   25,  38,  53,  69,  89,  113};
    std::vector<uint8_t> b(136, 0);
    putU16(b, 0, kHalfHalf);  // d = 0.5
    int ls[8];
    uint16_t high = 0;
    for (int s = 0; s < 8; ++s) {
      ls[s] = 5 + 7 * s;  // 5 .. 54: both halves of the 6 bits used
      b[4 + s / 2] = static_cast<uint8_t>(b[4 + s / 2] | ((ls[s] & 0xf) << (4 * (s % 2))));
      high = static_cast<uint16_t>(high | ((ls[s] >> 4) << (2 * s)));
      for (int j = 0; j < 16; ++j) b[8 + 16 * s + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    }
    putU16(b, 2, high);
    std::vector<float> want(256);
    for (int s = 0; s < 8; ++s) {
      for (int j = 0; j < 16; ++j) {
        want[32 * s + j] = 0.5f * static_cast<float>(ls[s] - 32) * levels[j];
        want[32 * s + 16 + j] = 0.5f * static_cast<float>(ls[s] - 32) * levels[15 - j];
      }
    }
    compareAll(decode(TensorType::IQ4_XS, b, 256), want);
  }

  void q4_1AddsTheMinimum() {
    std::vector<uint8_t> b(20);
    putU16(b, 0, kHalfQuarter);
    putU16(b, 2, kHalfMinus2);
    for (int j = 0; j < 16; ++j) b[4 + j] = pattern(j);
    std::vector<float> want(32);
    for (int i = 0; i < 32; ++i) {
      const int q = i < 16 ? (pattern(i) & 0xf) : (pattern(i - 16) >> 4);
      want[i] = q * 0.25f - 2.0f;
    }
    compareAll(decode(TensorType::Q4_1, b, 32), want);
  }

  void q5_0TakesTheFifthBitFromQh() {
    std::vector<uint8_t> b(22);
    putU16(b, 0, kHalfHalf);
    const uint32_t qh = 0xA5C3F00F;
    std::memcpy(&b[2], &qh, 4);
    for (int j = 0; j < 16; ++j) b[6 + j] = pattern(j);
    std::vector<float> want(32);
    for (int i = 0; i < 32; ++i) {
      const int low = i < 16 ? (pattern(i) & 0xf) : (pattern(i - 16) >> 4);
      const int q = low | static_cast<int>(((qh >> i) & 1) << 4);  // bit i belongs to element i
      want[i] = (q - 16) * 0.5f;
    }
    compareAll(decode(TensorType::Q5_0, b, 32), want);
  }

  void q5_1TakesTheFifthBitAndAddsTheMinimum() {
    std::vector<uint8_t> b(24);
    putU16(b, 0, kHalfQuarter);
    putU16(b, 2, kHalfOne);
    const uint32_t qh = 0x0FF0A55A;
    std::memcpy(&b[4], &qh, 4);
    for (int j = 0; j < 16; ++j) b[8 + j] = pattern(j + 3);
    std::vector<float> want(32);
    for (int i = 0; i < 32; ++i) {
      const int low = i < 16 ? (pattern(i + 3) & 0xf) : (pattern(i - 16 + 3) >> 4);
      const int q = low | static_cast<int>(((qh >> i) & 1) << 4);
      want[i] = q * 0.25f + 1.0f;
    }
    compareAll(decode(TensorType::Q5_1, b, 32), want);
  }

  void q2_KUsesFourBitScalesAndMins() {
    std::vector<uint8_t> b(84);
    for (int s = 0; s < 16; ++s) b[s] = static_cast<uint8_t>(((s * 5) & 0xf) | ((15 - s) << 4));
    for (int j = 0; j < 64; ++j) b[16 + j] = pattern(j);
    putU16(b, 80, kHalfHalf);     // d
    putU16(b, 82, kHalfQuarter);  // dmin
    std::vector<float> want(256);
    for (int e = 0; e < 256; ++e) {
      const int half = e / 128, k = (e % 128) / 32, l = e % 32;
      const int q = (pattern(32 * half + l) >> (2 * k)) & 3;
      const int sub = e / 16;
      want[e] = 0.5f * static_cast<float>(b[sub] & 0xf) * static_cast<float>(q) -
                0.25f * static_cast<float>(b[sub] >> 4);
    }
    compareAll(decode(TensorType::Q2_K, b, 256), want);
  }

  void q3_KSubtractsFourWhenTheHighBitIsClear() {
    std::vector<uint8_t> b(110);
    for (int j = 0; j < 32; ++j) b[j] = pattern(j + 100);  // hmask
    for (int j = 0; j < 64; ++j) b[32 + j] = pattern(j);   // qs
    int scale6[16];                                        // 6-bit scales, stored +32
    for (int s = 0; s < 16; ++s) scale6[s] = (s * 13 + 5) & 63;
    for (int s = 0; s < 16; ++s) {
      if (s < 8) {
        b[96 + s] = static_cast<uint8_t>(b[96 + s] | (scale6[s] & 0xf));
      } else {
        b[96 + s - 8] = static_cast<uint8_t>(b[96 + s - 8] | ((scale6[s] & 0xf) << 4));
      }
      b[96 + 8 + s % 4] =
          static_cast<uint8_t>(b[96 + 8 + s % 4] | ((scale6[s] >> 4) << (2 * (s / 4))));
    }
    putU16(b, 108, kHalfHalf);
    std::vector<float> want(256);
    for (int e = 0; e < 256; ++e) {
      const int half = e / 128, k = (e % 128) / 32, l = e % 32;
      const int low = (pattern(32 * half + l) >> (2 * k)) & 3;
      const bool high = (b[l] >> (e / 32)) & 1;
      const int q = low - (high ? 0 : 4);
      want[e] = 0.5f * static_cast<float>(scale6[e / 16] - 32) * static_cast<float>(q);
    }
    compareAll(decode(TensorType::Q3_K, b, 256), want);
  }

  void q4_KUsesSixBitScalesAndMinsPerSubBlock() {
    std::vector<uint8_t> b(144);
    putU16(b, 0, kHalfOne);   // d
    putU16(b, 2, kHalfHalf);  // dmin
    packKScales(b, 4);
    for (int j = 0; j < 128; ++j) b[16 + j] = pattern(j);
    std::vector<float> want(256);
    for (int e = 0; e < 256; ++e) {
      const int chunk = e / 64, high = (e % 64) / 32, l = e % 32;
      const uint8_t byte = pattern(32 * chunk + l);
      const int q = high ? byte >> 4 : byte & 0xf;
      const int sub = e / 32;
      want[e] = 1.0f * static_cast<float>(kSc[sub]) * static_cast<float>(q) -
                0.5f * static_cast<float>(kMin[sub]);
    }
    compareAll(decode(TensorType::Q4_K, b, 256), want);
  }

  void q5_KAddsSixteenFromQh() {
    std::vector<uint8_t> b(176);
    putU16(b, 0, kHalfHalf);
    putU16(b, 2, kHalfQuarter);
    packKScales(b, 4);
    for (int j = 0; j < 32; ++j) b[16 + j] = pattern(j + 50);  // qh
    for (int j = 0; j < 128; ++j) b[48 + j] = pattern(j);      // qs
    std::vector<float> want(256);
    for (int e = 0; e < 256; ++e) {
      const int chunk = e / 64, high = (e % 64) / 32, l = e % 32;
      const uint8_t byte = pattern(32 * chunk + l);
      const int low = high ? byte >> 4 : byte & 0xf;
      const int bit = (pattern(l + 50) >> (2 * chunk + high)) & 1;
      const int q = low + 16 * bit;
      const int sub = e / 32;
      want[e] = 0.5f * static_cast<float>(kSc[sub]) * static_cast<float>(q) -
                0.25f * static_cast<float>(kMin[sub]);
    }
    compareAll(decode(TensorType::Q5_K, b, 256), want);
  }

  void q6_KCombinesFourLowAndTwoHighBits() {
    std::vector<uint8_t> b(210);
    for (int j = 0; j < 128; ++j) b[j] = pattern(j);             // ql
    for (int j = 0; j < 64; ++j) b[128 + j] = pattern(j + 200);  // qh
    for (int s = 0; s < 16; ++s) b[192 + s] = static_cast<uint8_t>(static_cast<int8_t>(s * 9 - 70));
    putU16(b, 208, kHalfQuarter);
    std::vector<float> want(256);
    for (int e = 0; e < 256; ++e) {
      const int half = e / 128, quarter = (e % 128) / 32, l = e % 32;
      const uint8_t lowByte = b[64 * half + l + (quarter % 2) * 32];
      const int low = quarter < 2 ? lowByte & 0xf : lowByte >> 4;
      const int high2 = (b[128 + 32 * half + l] >> (2 * quarter)) & 3;
      const int q = (low | (high2 << 4)) - 32;
      const int scale = static_cast<int8_t>(b[192 + e / 16]);
      want[e] = 0.25f * static_cast<float>(scale) * static_cast<float>(q);
    }
    compareAll(decode(TensorType::Q6_K, b, 256), want);
  }

  void q8_KIsFloatScaleTimesSignedByte() {
    std::vector<uint8_t> b(292);
    const float d = 0.125f;
    std::memcpy(b.data(), &d, 4);
    for (int j = 0; j < 256; ++j) b[4 + j] = pattern(j);
    std::vector<float> want(256);
    for (int i = 0; i < 256; ++i) want[i] = 0.125f * static_cast<int8_t>(pattern(i));
    compareAll(decode(TensorType::Q8_K, b, 256), want);
  }

  void rowLengthMustBeAMultipleOfTheBlockSize() {
    std::vector<uint8_t> b(64);
    std::vector<float> out(40);
    QVERIFY_THROWS_EXCEPTION(shoal::Error,
                             dequantizeRow(TensorType::Q8_0, b.data(), out.data(), 40));
  }

  void unsupportedTypesThrow() {
    std::vector<uint8_t> b(256);
    std::vector<float> out(256);
    QVERIFY_THROWS_EXCEPTION(shoal::Error,
                             dequantizeRow(TensorType::IQ2_XXS, b.data(), out.data(), 256));
    QVERIFY(!typeTraits(TensorType::IQ2_XXS).dequantizable);
  }

  void typeTraitsMatchGgml() {
    struct Expect {
      TensorType type;
      int64_t block;
      size_t bytes;
    };
    const Expect expected[] = {
        {TensorType::F32, 1, 4},        {TensorType::F16, 1, 2},      {TensorType::BF16, 1, 2},
        {TensorType::Q4_0, 32, 18},     {TensorType::Q4_1, 32, 20},   {TensorType::Q5_0, 32, 22},
        {TensorType::Q5_1, 32, 24},     {TensorType::Q8_0, 32, 34},   {TensorType::Q8_1, 32, 36},
        {TensorType::Q2_K, 256, 84},    {TensorType::Q3_K, 256, 110}, {TensorType::Q4_K, 256, 144},
        {TensorType::Q5_K, 256, 176},   {TensorType::Q6_K, 256, 210}, {TensorType::Q8_K, 256, 292},
        {TensorType::I8, 1, 1},         {TensorType::I16, 1, 2},      {TensorType::I32, 1, 4},
        {TensorType::I64, 1, 8},        {TensorType::F64, 1, 8},      {TensorType::IQ4_NL, 32, 18},
        {TensorType::IQ4_XS, 256, 136}, {TensorType::MXFP4, 32, 17},
    };
    for (const Expect& e : expected) {
      const TypeTraits t = typeTraits(e.type);
      QCOMPARE(t.blockSize, e.block);
      QCOMPARE(t.typeSize, e.bytes);
    }
    QCOMPARE(rowBytes(TensorType::Q4_K, 512), size_t{288});
    QVERIFY(!typeTraits(4u).has_value());
    QVERIFY(!typeTraits(31u).has_value());
    QCOMPARE(typeFromName("Q4_k"), std::optional<TensorType>(TensorType::Q4_K));
    QCOMPARE(typeName(TensorType::Q6_K), std::string("q6_K"));
  }
};

QTEST_GUILESS_MAIN(GgufDequantizeTest)
#include "test_gguf_dequantize.moc"
