// Reference dequantization: one function per block layout, each with the layout it decodes.
// Layouts and the order of elements within a block follow ggml (ggml/src/ggml-common.h for the
// block structs, ggml/src/ggml-quants.c `dequantize_row_*` for the element order). All multi-byte
// fields are little-endian; halves are IEEE binary16 ("f16").

#include "engine/gguf/dequantize.h"

#include <cstring>
#include <limits>
#include <string>

#include "engine/error.h"
#include "engine/gguf/quant_common.h"

namespace shoal::gguf {

// ---- scalar conversions -------------------------------------------------------------------

float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) return bitsToFloat(sign);
    // Subnormal: mantissa * 2^-24, exact in f32.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  return bitsToFloat(bits);
}

uint16_t floatToHalf(float f) {
  uint32_t x = floatToBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return sign | 0x7e00u;  // NaN -> quiet NaN, as ggml does
  // 65520 is halfway between the largest half (65504) and 2^16; ties go to even, i.e. infinity.
  if (x >= 0x477ff000u) return sign | 0x7c00u;
  if (x < 0x38800000u) {  // below 2^-14: half subnormal (or zero), units of 2^-24
    const uint32_t e = x >> 23;
    const uint32_t shift = 126 - e;  // >= 14
    if (shift > 24) return sign;     // below 2^-25: rounds to zero
    const uint32_t mant = (x & 0x7fffffu) | 0x800000u;
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  const uint32_t rebased = x - (112u << 23);
  uint32_t h = rebased >> 13;
  const uint32_t rem = rebased & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;  // carry into the exponent is correct
  return static_cast<uint16_t>(sign | h);
}

float bf16ToFloat(uint16_t b) { return bitsToFloat(static_cast<uint32_t>(b) << 16); }

uint16_t floatToBf16(float f) {
  const uint32_t x = floatToBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

namespace {

// ---- plain types --------------------------------------------------------------------------

void dequantF32(const uint8_t* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void dequantF16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = halfToFloat(loadU16(src + 2 * i));
}

void dequantBf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16ToFloat(loadU16(src + 2 * i));
}

void dequantF64(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double v;
    std::memcpy(&v, src + 8 * i, sizeof v);
    // Out-of-range doubles become infinities, spelled out because the cast would be undefined.
    if (v > std::numeric_limits<float>::max()) {
      dst[i] = std::numeric_limits<float>::infinity();
    } else if (v < -std::numeric_limits<float>::max()) {
      dst[i] = -std::numeric_limits<float>::infinity();
    } else {
      dst[i] = static_cast<float>(v);
    }
  }
}

// ---- 32-element blocks --------------------------------------------------------------------

// Q4_0 (18 bytes): f16 d | u8 qs[16].
// Element j (0..15) is the low nibble of qs[j], element j+16 the high nibble; x = (q - 8) * d.
void dequantQ4_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 18, y += 32) {
    const float d = loadHalf(b);
    const uint8_t* qs = b + 2;
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((qs[j] & 0x0f) - 8) * d;
      y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

// IQ4_NL (18 bytes): f16 d | u8 qs[16], nibbles as Q4_0, each an index into kIq4NlValues;
// x = d * value.
void dequantIQ4_NL(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 18, y += 32) {
    const float d = loadHalf(b);
    const uint8_t* qs = b + 2;
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(kIq4NlValues[qs[j] & 0x0f]);
      y[j + 16] = d * static_cast<float>(kIq4NlValues[qs[j] >> 4]);
    }
  }
}

// MXFP4 (17 bytes, OCP microscaling FP4): u8 e (E8M0 scale) | u8 qs[16], nibbles as Q4_0, each
// an index into kMxfp4Values; x = e8m0Half(e) * value.
void dequantMXFP4(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 17, y += 32) {
    const float d = e8m0Half(b[0]);
    const uint8_t* qs = b + 1;
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(kMxfp4Values[qs[j] & 0x0f]) * d;
      y[j + 16] = static_cast<float>(kMxfp4Values[qs[j] >> 4]) * d;
    }
  }
}

// IQ4_XS (136 bytes): f16 d | u16 scales_h | u8 scales_l[4] | u8 qs[128]. Eight sub-blocks of
// 32, each with a 6-bit scale ls (low 4 bits: nibble s % 2 of scales_l[s / 2]; top 2: bits
// 2s..2s+1 of scales_h) and 16 bytes of IQ4_NL-style nibbles; x = d * (ls - 32) * value.
void dequantIQ4_XS(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 136) {
    const float d = loadHalf(b);
    const uint16_t high = loadU16(b + 2);
    for (int s = 0; s < 8; ++s, y += 32) {
      const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 0xf) | (((high >> (2 * s)) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      const uint8_t* qs = b + 8 + 16 * s;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * static_cast<float>(kIq4NlValues[qs[j] & 0x0f]);
        y[j + 16] = dl * static_cast<float>(kIq4NlValues[qs[j] >> 4]);
      }
    }
  }
}

// Q4_1 (20 bytes): f16 d | f16 m | u8 qs[16]. Nibble order as Q4_0; x = q * d + m.
void dequantQ4_1(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 20, y += 32) {
    const float d = loadHalf(b);
    const float m = loadHalf(b + 2);
    const uint8_t* qs = b + 4;
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(qs[j] & 0x0f) * d + m;
      y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
    }
  }
}

// Q5_0 (22 bytes): f16 d | u32 qh | u8 qs[16].
// Low 4 bits as Q4_0; bit j of qh is the 5th bit of element j, bit j+16 that of element j+16;
// x = (q - 16) * d.
void dequantQ5_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 22, y += 32) {
    const float d = loadHalf(b);
    const uint32_t qh = loadU32(b + 2);
    const uint8_t* qs = b + 6;
    for (int j = 0; j < 16; ++j) {
      const int hi0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int hi1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      y[j] = static_cast<float>(((qs[j] & 0x0f) | hi0) - 16) * d;
      y[j + 16] = static_cast<float>(((qs[j] >> 4) | hi1) - 16) * d;
    }
  }
}

// Q5_1 (24 bytes): f16 d | f16 m | u32 qh | u8 qs[16]. Bits as Q5_0; x = q * d + m.
void dequantQ5_1(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 24, y += 32) {
    const float d = loadHalf(b);
    const float m = loadHalf(b + 2);
    const uint32_t qh = loadU32(b + 4);
    const uint8_t* qs = b + 8;
    for (int j = 0; j < 16; ++j) {
      const int hi0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int hi1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      y[j] = static_cast<float>((qs[j] & 0x0f) | hi0) * d + m;
      y[j + 16] = static_cast<float>((qs[j] >> 4) | hi1) * d + m;
    }
  }
}

// Q8_0 (34 bytes): f16 d | i8 qs[32]; x = q * d.
void dequantQ8_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 34, y += 32) {
    const float d = loadHalf(b);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
  }
}

// Q8_1 (36 bytes): f16 d | f16 s | i8 qs[32]; x = q * d. s = d * sum(q) only serves dot products.
void dequantQ8_1(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 36, y += 32) {
    const float d = loadHalf(b);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[4 + j])) * d;
  }
}

// ---- 256-element super-blocks (k-quants) --------------------------------------------------

// Q2_K (84 bytes): u8 scales[16] | u8 qs[64] | f16 d | f16 dmin.
// 16 sub-blocks of 16; scales[s] low nibble = scale, high nibble = min of sub-block s.
// Each 128-element half uses 32 bytes of qs: element 32*k + l (k = 0..3, l = 0..31) is
// bits 2k..2k+1 of qs[l]; sub-block index follows the element order. x = d*sc*q - dmin*m.
void dequantQ2_K(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 84) {
    const uint8_t* scales = b;
    const uint8_t* q = b + 16;
    const float d = loadHalf(b + 80);
    const float dmin = loadHalf(b + 82);
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {
          const uint8_t sc = scales[is++];
          const float dl = d * static_cast<float>(sc & 0x0f);
          const float ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) {
            *y++ = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
          }
        }
      }
    }
  }
}

// Q3_K (110 bytes): u8 hmask[32] | u8 qs[64] | u8 scales[12] | f16 d.
// 16 sub-blocks of 16 with signed 6-bit scales (stored + 32): scale s has its low 4 bits in
// scales[s] (s < 8, low nibble) or scales[s-8] (high nibble), and its top 2 bits at bits
// 2*(s/4) of scales[8 + s%4]. Low 2 bits of element 32*k + l of each 128-half: bits 2k of
// qs[l]; its high bit is bit (half*4 + k) of hmask[l], and a CLEAR high bit means q - 4.
// x = d * (scale - 32) * q, with q in -4..3.
void dequantQ3_K(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 110) {
    const uint8_t* hmask = b;
    const uint8_t* q = b + 32;
    const uint8_t* packed = b + 96;
    const float d = loadHalf(b + 108);
    int scales[16];
    for (int s = 0; s < 16; ++s) {
      const int low = s < 8 ? (packed[s] & 0x0f) : (packed[s - 8] >> 4);
      const int high = (packed[8 + s % 4] >> (2 * (s / 4))) & 3;
      scales[s] = (low | (high << 4)) - 32;
    }
    int is = 0;
    uint8_t m = 1;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
        for (int part = 0; part < 2; ++part) {
          const float dl = d * static_cast<float>(scales[is++]);
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int v = ((q[l] >> shift) & 3) - ((hmask[l] & m) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

// Q4_K (144 bytes): f16 d | f16 dmin | u8 scales[12] | u8 qs[128].
// 8 sub-blocks of 32 with 6-bit scale and min (decodeScaleMinK4). Each 64-element chunk c uses
// qs[32c..32c+31]: low nibbles are sub-block 2c, high nibbles sub-block 2c+1.
// x = d*sc*q - dmin*m.
void dequantQ4_K(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 144) {
    const float d = loadHalf(b);
    const float dmin = loadHalf(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* q = b + 16;
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc, m;
      decodeScaleMinK4(2 * c, scales, sc, m);
      const float d1 = d * sc, m1 = dmin * m;
      decodeScaleMinK4(2 * c + 1, scales, sc, m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0f) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

// Q5_K (176 bytes): f16 d | f16 dmin | u8 scales[12] | u8 qh[32] | u8 qs[128].
// As Q4_K, plus a 5th bit: for chunk c, bit 2c of qh[l] belongs to the low-nibble element l and
// bit 2c+1 to the high-nibble element l. x = d*sc*q - dmin*m, q in 0..31.
void dequantQ5_K(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 176) {
    const float d = loadHalf(b);
    const float dmin = loadHalf(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* qh = b + 16;
    const uint8_t* ql = b + 48;
    for (int c = 0; c < 4; ++c, ql += 32) {
      uint8_t sc, m;
      decodeScaleMinK4(2 * c, scales, sc, m);
      const float d1 = d * sc, m1 = dmin * m;
      decodeScaleMinK4(2 * c + 1, scales, sc, m);
      const float d2 = d * sc, m2 = dmin * m;
      const uint8_t u1 = static_cast<uint8_t>(1u << (2 * c));
      const uint8_t u2 = static_cast<uint8_t>(2u << (2 * c));
      for (int l = 0; l < 32; ++l) {
        *y++ = d1 * static_cast<float>((ql[l] & 0x0f) + ((qh[l] & u1) ? 16 : 0)) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
      }
    }
  }
}

// Q6_K (210 bytes): u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d.
// Each 128-element half h uses ql[64h..64h+63], qh[32h..32h+31], scales[8h..8h+7]. For l in
// 0..31: element l = low nibble of ql[l] | bits 0-1 of qh[l] << 4; element l+32 = low nibble of
// ql[l+32] | bits 2-3; element l+64 = high nibble of ql[l] | bits 4-5; element l+96 = high
// nibble of ql[l+32] | bits 6-7. Sub-blocks are 16 elements: scale index 8h + element/16.
// x = d * scale * (q - 32).
void dequantQ6_K(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 210) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    const float d = loadHalf(b + 208);
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, y += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

// Q8_K (292 bytes): f32 d | i8 qs[256] | i16 bsums[16]; x = q * d. bsums (sums of 16 quants)
// only serve dot products.
void dequantQ8_K(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 292, y += 256) {
    const float d = loadF32(b);
    for (int j = 0; j < 256; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[4 + j]));
  }
}

}  // namespace

void dequantizeRow(TensorType type, const void* src, float* dst, int64_t n) {
  const TypeTraits traits = typeTraits(type);
  if (n < 0 || n % traits.blockSize != 0) {
    throw Error("dequantizeRow: " + std::to_string(n) + " elements is not a multiple of the " +
                std::string(traits.name) + " block size " + std::to_string(traits.blockSize));
  }
  const auto* bytes = static_cast<const uint8_t*>(src);
  const int64_t nb = n / traits.blockSize;
  switch (type) {
    case TensorType::F32:
      return dequantF32(bytes, dst, n);
    case TensorType::F16:
      return dequantF16(bytes, dst, n);
    case TensorType::BF16:
      return dequantBf16(bytes, dst, n);
    case TensorType::F64:
      return dequantF64(bytes, dst, n);
    case TensorType::Q4_0:
      return dequantQ4_0(bytes, dst, nb);
    case TensorType::Q4_1:
      return dequantQ4_1(bytes, dst, nb);
    case TensorType::Q5_0:
      return dequantQ5_0(bytes, dst, nb);
    case TensorType::Q5_1:
      return dequantQ5_1(bytes, dst, nb);
    case TensorType::Q8_0:
      return dequantQ8_0(bytes, dst, nb);
    case TensorType::Q8_1:
      return dequantQ8_1(bytes, dst, nb);
    case TensorType::Q2_K:
      return dequantQ2_K(bytes, dst, nb);
    case TensorType::Q3_K:
      return dequantQ3_K(bytes, dst, nb);
    case TensorType::Q4_K:
      return dequantQ4_K(bytes, dst, nb);
    case TensorType::Q5_K:
      return dequantQ5_K(bytes, dst, nb);
    case TensorType::Q6_K:
      return dequantQ6_K(bytes, dst, nb);
    case TensorType::Q8_K:
      return dequantQ8_K(bytes, dst, nb);
    case TensorType::IQ4_NL:
      return dequantIQ4_NL(bytes, dst, nb);
    case TensorType::MXFP4:
      return dequantMXFP4(bytes, dst, nb);
    case TensorType::IQ4_XS:
      return dequantIQ4_XS(bytes, dst, nb);
    default:
      throw Error("dequantizeRow: type " + std::string(traits.name) + " is not supported");
  }
}

}  // namespace shoal::gguf
