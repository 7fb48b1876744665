#pragma once
// Reading of the GGUF quantization blocks by the CUDA kernels, as __host__ __device__ code: the
// device runs it (matvec.cu, dequant.cu) and block_math_host.cu builds the same functions for the
// host, where test_cuda_block_math holds them to the engine's reference without a GPU.
//
// Layouts are ggml's (ggml-common.h block_*); engine/gguf/dequantize.cpp documents each one next
// to its reference decoder and kernels/cpu/block_layouts.h has them as structs. A row is read as
// 32-element sub-blocks: sub-block s of a 32-element format is block s; of a 256-element format
// (the K-quants, IQ4_XS) it is sub-block s % 8 of super-block s / 8.
//
// Two kinds of function per type T:
//   subBlockDot<T>(row, s, x, xds): sub-block s of a row times 32 activations quantized to int8
//     (activation_quant.cu: x = the 32 int8 as 8 ints, xds = (d, d * sum(q))), with integer
//     dot products four at a time (dp4a) and the scales applied per sub-block;
//   dequantSubBlock<T>(row, s, y): sub-block s as 32 floats, the very bits dequantizeRow gives
//     (the same float operations in the same order, and no fma contraction).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_types.h>

#include <cstdint>
#include <cstring>

#include "engine/gguf/tensor_type.h"

#define SHOAL_HD __host__ __device__ __forceinline__
// `#pragma unroll` for the device pass only (the host compiler would warn about it).
#ifdef __CUDA_ARCH__
#define SHOAL_UNROLL _Pragma("unroll")
#else
#define SHOAL_UNROLL
#endif

namespace shoal::cuda {

using gguf::TensorType;

// ---- device intrinsics, with plain host versions --------------------------------------------

// c + the dot product of a's and b's four signed bytes (__dp4a).
SHOAL_HD int dp4a(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
#else
  for (int k = 0; k < 32; k += 8)
    c += static_cast<int8_t>(static_cast<uint8_t>(a >> k)) *
         static_cast<int8_t>(static_cast<uint8_t>(b >> k));
  return c;
#endif
}

// Bytewise a - b modulo 256 (__vsub4): turns biased unsigned quants into signed bytes.
SHOAL_HD uint32_t vsub4(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  return __vsub4(a, b);
#else
  uint32_t r = 0;
  for (int k = 0; k < 32; k += 8) r |= ((((a >> k) & 0xFFu) - ((b >> k) & 0xFFu)) & 0xFFu) << k;
  return r;
#endif
}

// Byte k of the result is byte (nibble k of s) of the 8 bytes b:a (__byte_perm; only selectors
// 0..7 are used here, so the host version leaves out the sign-replicating mode).
SHOAL_HD uint32_t bytePerm(uint32_t a, uint32_t b, uint32_t s) {
#ifdef __CUDA_ARCH__
  return __byte_perm(a, b, s);
#else
  const uint64_t both = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t r = 0;
  for (int k = 0; k < 4; ++k)
    r |= static_cast<uint32_t>((both >> (8 * ((s >> (4 * k)) & 7u))) & 0xFFu) << (8 * k);
  return r;
#endif
}

// Float products and differences the compiler may not fuse into an fma: the dequantizers give
// dequantizeRow's rounding, which has none (the host build uses -ffp-contract=off).
SHOAL_HD float mulRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
SHOAL_HD float addRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
SHOAL_HD float subRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

SHOAL_HD float floatFromBits(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// ---- loads ------------------------------------------------------------------------------------

// Two bytes from a 2-byte aligned address (block fields sit at even offsets in every format but
// MXFP4, whose 17-byte blocks are read bytewise).
SHOAL_HD uint32_t load2(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint16_t*>(p);
#else
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

// Four bytes (little-endian) from a 2-byte aligned address: two 16-bit loads on the device.
SHOAL_HD uint32_t load4(const uint8_t* p) { return load2(p) | (load2(p + 2) << 16); }

// Four bytes from any address.
SHOAL_HD uint32_t load4Bytes(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// A float from a 4-byte aligned address.
SHOAL_HD float loadF32(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const float*>(p);
#else
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

SHOAL_HD float halfBitsToFloat(uint32_t bits) {
  __half_raw raw;
  raw.x = static_cast<unsigned short>(bits);
  return __half2float(__half(raw));
}

// The f16 at a 2-byte aligned address.
SHOAL_HD float loadHalf(const uint8_t* p) { return halfBitsToFloat(load2(p)); }

// ---- layout pieces shared by several formats ----------------------------------------------------

constexpr int kQ4_0Bytes = 18, kQ4_1Bytes = 20, kQ5_0Bytes = 22, kQ5_1Bytes = 24, kQ8_0Bytes = 34,
              kIQ4_NLBytes = 18, kMXFP4Bytes = 17;
constexpr int kQ2_KBytes = 84, kQ3_KBytes = 110, kQ4_KBytes = 144, kQ5_KBytes = 176,
              kQ6_KBytes = 210, kIQ4_XSBytes = 136;

// The low nibbles (shift 0) or high nibbles (shift 4) of four packed bytes, one per byte.
SHOAL_HD uint32_t nibbles(uint32_t v, int shift) { return (v >> shift) & 0x0F0F0F0Fu; }

// Bits first..first+3 of `bits` moved to bit 4 of bytes 0..3: the fifth bits of four
// consecutive Q5_0/Q5_1 quants, whose block keeps them as one u32 (bit j: element j).
SHOAL_HD uint32_t fifthBits(uint32_t bits, int first) {
  const uint32_t b = bits >> first;
  return ((b & 1u) << 4) | ((b & 2u) << 11) | ((b & 4u) << 18) | ((b & 8u) << 25);
}

// Four signed bytes packed little-endian, for the level tables below.
constexpr uint32_t packBytes(int a, int b, int c, int d) {
  return static_cast<uint32_t>(static_cast<uint8_t>(a)) |
         (static_cast<uint32_t>(static_cast<uint8_t>(b)) << 8) |
         (static_cast<uint32_t>(static_cast<uint8_t>(c)) << 16) |
         (static_cast<uint32_t>(static_cast<uint8_t>(d)) << 24);
}

// Byte k of the result = table[byte k of idx] for four 4-bit indices, the 16-entry table held in
// four words (t0: entries 0..3, ..., t3: 12..15), so it lives in registers: two byte permutes
// pick from entries 0..7 and 8..15 by the index's low 3 bits, and its bit 3 chooses between them.
SHOAL_HD uint32_t lookup16(uint32_t idx, uint32_t t0, uint32_t t1, uint32_t t2, uint32_t t3) {
  // Byte k's low 3 bits go to selector nibble k (bits 8k.. move down by 4k).
  const uint32_t sel =
      (idx & 0x7u) | ((idx >> 4) & 0x70u) | ((idx >> 8) & 0x700u) | ((idx >> 12) & 0x7000u);
  const uint32_t low = bytePerm(t0, t1, sel), high = bytePerm(t2, t3, sel);
  const uint32_t upper = ((idx >> 3) & 0x01010101u) * 0xFFu;  // 0xFF where the index is >= 8
  return (low & ~upper) | (high & upper);
}

// IQ4_NL's (and IQ4_XS's) 16 non-linear levels, ggml-common.h kvalues_iq4nl, of four nibbles.
SHOAL_HD uint32_t iq4Levels(uint32_t idx) {
  return lookup16(idx, packBytes(-127, -104, -83, -65), packBytes(-49, -35, -22, -10),
                  packBytes(1, 13, 25, 38), packBytes(53, 69, 89, 113));
}

// MXFP4's E2M1 levels doubled so they are integers (ggml-common.h kvalues_mxfp4: 0, 0.5, 1,
// 1.5, 2, 3, 4, 6 and their negatives, times 2); mxfp4Scale halves them back.
SHOAL_HD uint32_t mxfp4Levels(uint32_t idx) {
  return lookup16(idx, packBytes(0, 1, 2, 3), packBytes(4, 6, 8, 12), packBytes(0, -1, -2, -3),
                  packBytes(-4, -6, -8, -12));
}

// An MXFP4 block's E8M0 scale byte e as 2^(e - 127) / 2 (ggml_e8m0_to_fp32_half): the float
// with exponent field e - 1, or the subnormals 2^-128 and 2^-127 for e = 0 and 1.
SHOAL_HD float mxfp4Scale(uint32_t e) {
  return floatFromBits(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

// Signed byte k of a word, as a float.
SHOAL_HD float byteAsFloat(uint32_t v, int k) {
  return static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(v >> (8 * k))));
}

// 6-bit scale and minimum of sub-block j of a Q4_K/Q5_K super-block (q = its 12 packed scale
// bytes): sub-blocks 0..3 use the low 6 bits of bytes j (scale) and j + 4 (min); 4..7 take their
// low 4 bits from byte j + 4 and their top 2 from the spare top bits of bytes j - 4 and j
// (ggml get_scale_min_k4).
SHOAL_HD void q4kScaleMin(int j, const uint8_t* q, int& scale, int& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// A Q4_K or Q5_K sub-block's dot from its integer sum (both keep d, dmin and the 12 scale bytes
// at the same offsets): d * scale * dx * sum - dmin * min * dx * sum(xq).
SHOAL_HD float kquantResult(const uint8_t* b, int j, int sum, float2 xds) {
  int scale, min;
  q4kScaleMin(j, b + 4, scale, min);
  return loadHalf(b) * static_cast<float>(scale) * xds.x * static_cast<float>(sum) -
         loadHalf(b + 2) * static_cast<float>(min) * xds.y;
}

// A Q4_K or Q5_K sub-block's (d * scale, dmin * min), rounded as dequantizeRow rounds them.
SHOAL_HD float2 kquantScaleMin(const uint8_t* b, int j) {
  int scale, min;
  q4kScaleMin(j, b + 4, scale, min);
  return make_float2(mulRn(loadHalf(b), static_cast<float>(scale)),
                     mulRn(loadHalf(b + 2), static_cast<float>(min)));
}

// Signed 6-bit scale of 16-element sub-block t (0..15) of a Q3_K super-block (q = its 12 packed
// bytes, stored + 32): low 4 bits in byte t (t < 8, low nibble) or t - 8 (high nibble), top 2
// bits at bits 2(t/4).. of byte 8 + t % 4.
SHOAL_HD int q3kScale(const uint8_t* q, int t) {
  const int low = t < 8 ? (q[t] & 0xF) : (q[t - 8] >> 4);
  const int high = (q[8 + t % 4] >> (2 * (t / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// Signed 6-bit scale of sub-block j (0..7) of an IQ4_XS super-block b, stored + 32: low 4 bits
// in nibble j % 2 of scales_l[j / 2] (bytes 4..7), top 2 bits at bits 2j.. of scales_h (bytes
// 2..3).
SHOAL_HD int iq4xsScale(const uint8_t* b, int j) {
  const int low = (b[4 + j / 2] >> (4 * (j % 2))) & 0xF;
  const int high = (load2(b + 2) >> (2 * j)) & 3;
  return (low | (high << 4)) - 32;
}

// ---- per-type sub-block math ------------------------------------------------------------------

template <TensorType T>
SHOAL_HD float subBlockDot(const uint8_t* row, int64_t s, const int* x, float2 xds);
template <TensorType T>
SHOAL_HD void dequantSubBlock(const uint8_t* row, int64_t s, float* y);

// In the 32-element formats whose 16 quant bytes hold two elements each, byte l's low nibble is
// element l and its high nibble element l + 16: word i of the quants meets activation words i
// (low nibbles) and i + 4 (high nibbles).

// Q4_0 (18 bytes): f16 d | qs[16]; value = d * (nibble - 8).
template <>
SHOAL_HD float subBlockDot<TensorType::Q4_0>(const uint8_t* row, int64_t s, const int* x,
                                             float2 xds) {
  const uint8_t* b = row + s * kQ4_0Bytes;
  int sum = 0;
  SHOAL_UNROLL
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = load4(b + 2 + 4 * i);
    sum = dp4a(vsub4(nibbles(v, 0), 0x08080808u), x[i], sum);
    sum = dp4a(vsub4(nibbles(v, 4), 0x08080808u), x[i + 4], sum);
  }
  return loadHalf(b) * xds.x * static_cast<float>(sum);
}
template <>
SHOAL_HD void dequantSubBlock<TensorType::Q4_0>(const uint8_t* row, int64_t s, float* y) {
  const uint8_t* b = row + s * kQ4_0Bytes;
  const float d = loadHalf(b);
  for (int l = 0; l < 16; ++l) {
    y[l] = mulRn(static_cast<float>((b[2 + l] & 0xF) - 8), d);
    y[l + 16] = mulRn(static_cast<float>((b[2 + l] >> 4) - 8), d);
  }
}

// Q4_1 (20 bytes): f16 d | f16 m | qs[16]; value = d * nibble + m: the minimum meets the
// activations' sum (xds.y = dx * sum(q)).
template <>
SHOAL_HD float subBlockDot<TensorType::Q4_1>(const uint8_t* row, int64_t s, const int* x,
                                             float2 xds) {
  const uint8_t* b = row + s * kQ4_1Bytes;
  int sum = 0;
  SHOAL_UNROLL
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = load4(b + 4 + 4 * i);
    sum = dp4a(nibbles(v, 0), x[i], sum);
    sum = dp4a(nibbles(v, 4), x[i + 4], sum);
  }
  return loadHalf(b) * xds.x * static_cast<float>(sum) + loadHalf(b + 2) * xds.y;
}
template <>
SHOAL_HD void dequantSubBlock<TensorType::Q4_1>(const uint8_t* row, int64_t s, float* y) {
  const uint8_t* b = row + s * kQ4_1Bytes;
  const float d = loadHalf(b), m = loadHalf(b + 2);
  for (int l = 0; l < 16; ++l) {
    y[l] = addRn(mulRn(static_cast<float>(b[4 + l] & 0xF), d), m);
    y[l + 16] = addRn(mulRn(static_cast<float>(b[4 + l] >> 4), d), m);
  }
}

// Q5_0 (22 bytes): f16 d | u32 qh | qs[16]; element j's fifth bit is bit j of qh;
// value = d * (q - 16). The bias comes off bytewise so the integer sum stays exact.
template <>
SHOAL_HD float subBlockDot<TensorType::Q5_0>(const uint8_t* row, int64_t s, const int* x,
                                             float2 xds) {
  const uint8_t* b = row + s * kQ5_0Bytes;
  const uint32_t qh = load4(b + 2);
  int sum = 0;
  SHOAL_UNROLL
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = load4(b + 6 + 4 * i);
    sum = dp4a(vsub4(nibbles(v, 0) | fifthBits(qh, 4 * i), 0x10101010u), x[i], sum);
    sum = dp4a(vsub4(nibbles(v, 4) | fifthBits(qh, 16 + 4 * i), 0x10101010u), x[i + 4], sum);
  }
  return loadHalf(b) * xds.x * static_cast<float>(sum);
}
template <>
SHOAL_HD void dequantSubBlock<TensorType::Q5_0>(const uint8_t* row, int64_t s, float* y) {
  const uint8_t* b = row + s * kQ5_0Bytes;
  const float d = loadHalf(b);
  const uint32_t qh = load4(b + 2);
  for (int l = 0; l < 16; ++l) {
    const int q0 = (b[6 + l] & 0xF) | static_cast<int>(((qh >> l) & 1u) << 4);
    const int q1 = (b[6 + l] >> 4) | static_cast<int>(((qh >> (l + 16)) & 1u) << 4);
    y[l] = mulRn(static_cast<float>(q0 - 16), d);
    y[l + 16] = mulRn(static_cast<float>(q1 - 16), d);
  }
}

// Q5_1 (24 bytes): f16 d | f16 m | u32 qh | qs[16]; bits as Q5_0, value = d * q + m.
template <>
SHOAL_HD float subBlockDot<TensorType::Q5_1>(const uint8_t* row, int64_t s, const int* x,
                                             float2 xds) {
  const uint8_t* b = row + s * kQ5_1Bytes;
  const uint32_t qh = load4(b + 4);
  int sum = 0;
  SHOAL_UNROLL
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = load4(b + 8 + 4 * i);
    sum = dp4a(nibbles(v, 0) | fifthBits(qh, 4 * i), x[i], sum);
    sum = dp4a(nibbles(v, 4) | fifthBits(qh, 16 + 4 * i), x[i + 4], sum);
  }
  return loadHalf(b) * xds.x * static_cast<float>(sum) + loadHalf(b + 2) * xds.y;
}
template <>
SHOAL_HD void dequantSubBlock<TensorType::Q5_1>(const uint8_t* row, int64_t s, float* y) {
  const uint8_t* b = row + s * kQ5_1Bytes;
  const float d = loadHalf(b), m = loadHalf(b + 2);
  const uint32_t qh = load4(b + 4);
  for (int l = 0; l < 16; ++l) {
    const int q0 = (b[8 + l] & 0xF) | static_cast<int>(((qh >> l) & 1u) << 4);
    const int q1 = (b[8 + l] >> 4) | static_cast<int>(((qh >> (l + 16)) & 1u) << 4);
    y[l] = addRn(mulRn(static_cast<float>(q0), d), m);
    y[l + 16] = addRn(mulRn(static_cast<float>(q1), d), m);
  }
}

// Q8_0 (34 bytes): f16 d | i8 qs[32]; value = d * q.
template <>
SHOAL_HD float subBlockDot<TensorType::Q8_0>(const uint8_t* row, int64_t s, const int* x,
                                             float2 xds) {
  const uint8_t* b = row + s * kQ8_0Bytes;
  int sum = 0;
  SHOAL_UNROLL
  for (int i = 0; i < 8; ++i) sum = dp4a(load4(b + 2 + 4 * i), x[i], sum);
  return loadHalf(b) * xds.x * static_cast<float>(sum);
}
template <>
SHOAL_HD void dequantSubBlock<TensorType::Q8_0>(const uint8_t* row, int64_t s, float* y) {
  const uint8_t* b = row + s * kQ8_0Bytes;
  const float d = loadHalf(b);
  for (int l = 0; l < 32; ++l) y[l] = mulRn(static_cast<float>(static_cast<int8_t>(b[2 + l])), d);
}

// IQ4_NL (18 bytes): f16 d | qs[16], nibbles as Q4_0's, each an index into the IQ4 levels;
// value = d * level.
template <>
SHOAL_HD float subBlockDot<TensorType::IQ4_NL>(const uint8_t* row, int64_t s, const int* x,
                                               float2 xds) {
  const uint8_t* b = row + s * kIQ4_NLBytes;
  int sum = 0;
  SHOAL_UNROLL
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = load4(b + 2 + 4 * i);
    sum = dp4a(iq4Levels(nibbles(v, 0)), x[i], sum);
    sum = dp4a(iq4Levels(nibbles(v, 4)), x[i + 4], sum);
  }
  return loadHalf(b) * xds.x * static_cast<float>(sum);
}
template <>
SHOAL_HD void dequantSubBlock<TensorType::IQ4_NL>(const uint8_t* row, int64_t s, float* y) {
  const uint8_t* b = row + s * kIQ4_NLBytes;
  const float d = loadHalf(b);
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = load4(b + 2 + 4 * i);
    const uint32_t lo = iq4Levels(nibbles(v, 0)), hi = iq4Levels(nibbles(v, 4));
    for (int k = 0; k < 4; ++k) {
      y[4 * i + k] = mulRn(d, byteAsFloat(lo, k));
      y[16 + 4 * i + k] = mulRn(d, byteAsFloat(hi, k));
    }
  }
}

// MXFP4 (17 bytes): u8 e (E8M0 scale) | qs[16], nibbles as Q4_0's, each an index into the
// (doubled) E2M1 levels; value = mxfp4Scale(e) * level. Blocks sit at odd offsets: bytewise loads.
template <>
SHOAL_HD float subBlockDot<TensorType::MXFP4>(const uint8_t* row, int64_t s, const int* x,
                                              float2 xds) {
  const uint8_t* b = row + s * kMXFP4Bytes;
  int sum = 0;
  SHOAL_UNROLL
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = load4Bytes(b + 1 + 4 * i);
    sum = dp4a(mxfp4Levels(nibbles(v, 0)), x[i], sum);
    sum = dp4a(mxfp4Levels(nibbles(v, 4)), x[i + 4], sum);
  }
  return mxfp4Scale(b[0]) * xds.x * static_cast<float>(sum);
}
template <>
SHOAL_HD void dequantSubBlock<TensorType::MXFP4>(const uint8_t* row, int64_t s, float* y) {
  const uint8_t* b = row + s * kMXFP4Bytes;
  const float d = mxfp4Scale(b[0]);
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = load4Bytes(b + 1 + 4 * i);
    const uint32_t lo = mxfp4Levels(nibbles(v, 0)), hi = mxfp4Levels(nibbles(v, 4));
    for (int k = 0; k < 4; ++k) {
      y[4 * i + k] = mulRn(byteAsFloat(lo, k), d);
      y[16 + 4 * i + k] = mulRn(byteAsFloat(hi, k), d);
    }
  }
}

// Q2_K (84 bytes): scales[16] | qs[64] | f16 d | f16 dmin (ggml-common.h block_q2_K). Element
// 128h + 32g + l is bits 2g..2g+1 of qs[32h + l], so sub-block j = 4h + g is bits 2g of
// qs[32h .. 32h + 31]. Each 16 elements have a byte of scale (low nibble) and min (high);
// sub-block j uses scales[2j] and [2j + 1]. value = d * scale * q - dmin * min: the min meets
// the sum of each 16 activations, dp4a against ones.
template <>
SHOAL_HD float subBlockDot<TensorType::Q2_K>(const uint8_t* row, int64_t s, const int* x,
                                             float2 xds) {
  const uint8_t* b = row + (s / 8) * kQ2_KBytes;
  const int j = static_cast<int>(s % 8);
  const uint8_t* qs = b + 16 + 32 * (j / 4);
  const int shift = 2 * (j % 4);
  int dot[2] = {0, 0}, xsum[2] = {0, 0};
  SHOAL_UNROLL
  for (int i = 0; i < 8; ++i) {
    dot[i / 4] = dp4a((load4(qs + 4 * i) >> shift) & 0x03030303u, x[i], dot[i / 4]);
    xsum[i / 4] = dp4a(0x01010101u, x[i], xsum[i / 4]);
  }
  const uint32_t sc = load2(b + 2 * j);  // scale/min bytes of the two halves
  const int scaled =
      static_cast<int>(sc & 0xF) * dot[0] + static_cast<int>((sc >> 8) & 0xF) * dot[1];
  const int mins =
      static_cast<int>((sc >> 4) & 0xF) * xsum[0] + static_cast<int>(sc >> 12) * xsum[1];
  return xds.x * (loadHalf(b + 80) * static_cast<float>(scaled) -
                  loadHalf(b + 82) * static_cast<float>(mins));
}
template <>
SHOAL_HD void dequantSubBlock<TensorType::Q2_K>(const uint8_t* row, int64_t s, float* y) {
  const uint8_t* b = row + (s / 8) * kQ2_KBytes;
  const int j = static_cast<int>(s % 8);
  const uint8_t* qs = b + 16 + 32 * (j / 4);
  const int shift = 2 * (j % 4);
  const float d = loadHalf(b + 80), dmin = loadHalf(b + 82);
  for (int half = 0; half < 2; ++half) {
    const uint8_t sc = b[2 * j + half];
    const float dl = mulRn(d, static_cast<float>(sc & 0xF));
    const float ml = mulRn(dmin, static_cast<float>(sc >> 4));
    for (int l = 16 * half; l < 16 * half + 16; ++l)
      y[l] = subRn(mulRn(dl, static_cast<float>((qs[l] >> shift) & 3)), ml);
  }
}

// Q3_K (110 bytes): hmask[32] | qs[64] | scales[12] | f16 d (ggml-common.h block_q3_K). Low 2
// bits as Q2_K's; element 128h + 32g + l has its third bit at bit 4h + g (= sub-block j) of
// hmask[l], a clear bit meaning q - 4. Signed 6-bit scales per 16 elements (q3kScale);
// value = d * scale * q with q in -4..3.
template <>
SHOAL_HD float subBlockDot<TensorType::Q3_K>(const uint8_t* row, int64_t s, const int* x,
                                             float2 xds) {
  const uint8_t* b = row + (s / 8) * kQ3_KBytes;
  const int j = static_cast<int>(s % 8);
  const uint8_t* qs = b + 32 + 32 * (j / 4);
  const int shift = 2 * (j % 4);
  int dot[2] = {0, 0};
  SHOAL_UNROLL
  for (int i = 0; i < 8; ++i) {
    const uint32_t low = (load4(qs + 4 * i) >> shift) & 0x03030303u;
    const uint32_t high = ((load4(b + 4 * i) >> j) & 0x01010101u) << 2;
    dot[i / 4] = dp4a(vsub4(low | high, 0x04040404u), x[i], dot[i / 4]);
  }
  const int scaled = q3kScale(b + 96, 2 * j) * dot[0] + q3kScale(b + 96, 2 * j + 1) * dot[1];
  return loadHalf(b + 108) * xds.x * static_cast<float>(scaled);
}
template <>
SHOAL_HD void dequantSubBlock<TensorType::Q3_K>(const uint8_t* row, int64_t s, float* y) {
  const uint8_t* b = row + (s / 8) * kQ3_KBytes;
  const int j = static_cast<int>(s % 8);
  const uint8_t* qs = b + 32 + 32 * (j / 4);
  const int shift = 2 * (j % 4);
  const float d = loadHalf(b + 108);
  for (int half = 0; half < 2; ++half) {
    const float dl = mulRn(d, static_cast<float>(q3kScale(b + 96, 2 * j + half)));
    for (int l = 16 * half; l < 16 * half + 16; ++l) {
      const int q = ((qs[l] >> shift) & 3) - (((b[l] >> j) & 1) ? 0 : 4);
      y[l] = mulRn(dl, static_cast<float>(q));
    }
  }
}

// Q4_K (144 bytes): f16 d | f16 dmin | scales[12] | qs[128] (ggml-common.h block_q4_K); sub-blocks
// 2c and 2c + 1 are the low and high nibbles of qs[32c .. 32c + 31]; value = d * scale * q -
// dmin * min (q4kScaleMin), the min meeting the activations' sum.
template <>
SHOAL_HD float subBlockDot<TensorType::Q4_K>(const uint8_t* row, int64_t s, const int* x,
                                             float2 xds) {
  const uint8_t* b = row + (s / 8) * kQ4_KBytes;
  const int j = static_cast<int>(s % 8);
  const uint8_t* qs = b + 16 + 32 * (j / 2);
  const int shift = (j & 1) * 4;
  int sum = 0;
  SHOAL_UNROLL
  for (int i = 0; i < 8; ++i) sum = dp4a(nibbles(load4(qs + 4 * i), shift), x[i], sum);
  return kquantResult(b, j, sum, xds);
}
template <>
SHOAL_HD void dequantSubBlock<TensorType::Q4_K>(const uint8_t* row, int64_t s, float* y) {
  const uint8_t* b = row + (s / 8) * kQ4_KBytes;
  const int j = static_cast<int>(s % 8);
  const float2 dm = kquantScaleMin(b, j);
  const float d = dm.x, m = dm.y;
  const uint8_t* qs = b + 16 + 32 * (j / 2);
  const int shift = (j & 1) * 4;
  for (int l = 0; l < 32; ++l)
    y[l] = subRn(mulRn(d, static_cast<float>((qs[l] >> shift) & 0xF)), m);
}

// Q5_K (176 bytes): f16 d | f16 dmin | scales[12] | qh[32] | qs[128] (ggml-common.h block_q5_K):
// Q4_K's nibbles and scales, plus element l of sub-block j has its fifth bit at bit j of qh[l].
template <>
SHOAL_HD float subBlockDot<TensorType::Q5_K>(const uint8_t* row, int64_t s, const int* x,
                                             float2 xds) {
  const uint8_t* b = row + (s / 8) * kQ5_KBytes;
  const int j = static_cast<int>(s % 8);
  const uint8_t* qs = b + 48 + 32 * (j / 2);
  const int shift = (j & 1) * 4;
  int sum = 0;
  SHOAL_UNROLL
  for (int i = 0; i < 8; ++i) {
    const uint32_t high = ((load4(b + 16 + 4 * i) >> j) & 0x01010101u) << 4;
    sum = dp4a(nibbles(load4(qs + 4 * i), shift) | high, x[i], sum);
  }
  return kquantResult(b, j, sum, xds);
}
template <>
SHOAL_HD void dequantSubBlock<TensorType::Q5_K>(const uint8_t* row, int64_t s, float* y) {
  const uint8_t* b = row + (s / 8) * kQ5_KBytes;
  const int j = static_cast<int>(s % 8);
  const float2 dm = kquantScaleMin(b, j);
  const float d = dm.x, m = dm.y;
  const uint8_t* qs = b + 48 + 32 * (j / 2);
  const int shift = (j & 1) * 4;
  for (int l = 0; l < 32; ++l) {
    const int q = ((qs[l] >> shift) & 0xF) | (((b[16 + l] >> j) & 1) << 4);
    y[l] = subRn(mulRn(d, static_cast<float>(q)), m);
  }
}

// Q6_K (210 bytes): ql[128] | qh[64] | i8 scales[16] | f16 d (ggml-common.h block_q6_K).
// Sub-block j = 4h + r: half h, range r (elements 32r..32r+31 of the half): low bits from
// ql[64h + 32(r&1) + l] (high nibble when r >= 2), top 2 bits from bits 2r..2r+1 of qh[32h + l];
// value = d * scale * (q - 32) with one int8 scale per 16 elements.
template <>
SHOAL_HD float subBlockDot<TensorType::Q6_K>(const uint8_t* row, int64_t s, const int* x,
                                             float2 xds) {
  const uint8_t* b = row + (s / 8) * kQ6_KBytes;
  const int j = static_cast<int>(s % 8);
  const int h = j / 4, r = j % 4;
  const uint8_t* ql = b + 64 * h + 32 * (r & 1);
  const uint8_t* qh = b + 128 + 32 * h;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * h + 2 * r;
  const int lowShift = r >= 2 ? 4 : 0;
  int dot[2] = {0, 0};
  SHOAL_UNROLL
  for (int i = 0; i < 8; ++i) {
    const uint32_t lo = nibbles(load4(ql + 4 * i), lowShift);
    const uint32_t hi = ((load4(qh + 4 * i) >> (2 * r)) & 0x03030303u) << 4;
    dot[i / 4] = dp4a(vsub4(lo | hi, 0x20202020u), x[i], dot[i / 4]);
  }
  return loadHalf(b + 208) * xds.x * static_cast<float>(sc[0] * dot[0] + sc[1] * dot[1]);
}
template <>
SHOAL_HD void dequantSubBlock<TensorType::Q6_K>(const uint8_t* row, int64_t s, float* y) {
  const uint8_t* b = row + (s / 8) * kQ6_KBytes;
  const int j = static_cast<int>(s % 8);
  const int h = j / 4, r = j % 4;
  const uint8_t* ql = b + 64 * h + 32 * (r & 1);
  const uint8_t* qh = b + 128 + 32 * h;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * h + 2 * r;
  const float d = loadHalf(b + 208);
  const int lowShift = r >= 2 ? 4 : 0;
  for (int l = 0; l < 32; ++l) {
    const int q = (((ql[l] >> lowShift) & 0xF) | (((qh[l] >> (2 * r)) & 3) << 4)) - 32;
    y[l] = mulRn(mulRn(d, static_cast<float>(sc[l / 16])), static_cast<float>(q));
  }
}

// IQ4_XS (136 bytes): f16 d | u16 scales_h | scales_l[4] | qs[128] (ggml-common.h block_iq4_xs);
// sub-block j has 16 bytes of IQ4_NL nibbles at qs[16j] and a signed 6-bit scale (iq4xsScale);
// value = d * scale * level.
template <>
SHOAL_HD float subBlockDot<TensorType::IQ4_XS>(const uint8_t* row, int64_t s, const int* x,
                                               float2 xds) {
  const uint8_t* b = row + (s / 8) * kIQ4_XSBytes;
  const int j = static_cast<int>(s % 8);
  const uint8_t* qs = b + 8 + 16 * j;
  int sum = 0;
  SHOAL_UNROLL
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = load4(qs + 4 * i);
    sum = dp4a(iq4Levels(nibbles(v, 0)), x[i], sum);
    sum = dp4a(iq4Levels(nibbles(v, 4)), x[i + 4], sum);
  }
  return loadHalf(b) * xds.x * static_cast<float>(iq4xsScale(b, j) * sum);
}
template <>
SHOAL_HD void dequantSubBlock<TensorType::IQ4_XS>(const uint8_t* row, int64_t s, float* y) {
  const uint8_t* b = row + (s / 8) * kIQ4_XSBytes;
  const int j = static_cast<int>(s % 8);
  const uint8_t* qs = b + 8 + 16 * j;
  const float dl = mulRn(loadHalf(b), static_cast<float>(iq4xsScale(b, j)));
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = load4(qs + 4 * i);
    const uint32_t lo = iq4Levels(nibbles(v, 0)), hi = iq4Levels(nibbles(v, 4));
    for (int k = 0; k < 4; ++k) {
      y[4 * i + k] = mulRn(dl, byteAsFloat(lo, k));
      y[16 + 4 * i + k] = mulRn(dl, byteAsFloat(hi, k));
    }
  }
}

// Float types: the mat-vec reads them against float activations (matvec.cu), so only the
// dequantizer is per sub-block.
template <>
SHOAL_HD void dequantSubBlock<TensorType::F16>(const uint8_t* row, int64_t s, float* y) {
  const uint8_t* h = row + s * 64;
  for (int l = 0; l < 32; ++l) y[l] = halfBitsToFloat(load2(h + 2 * l));
}
template <>
SHOAL_HD void dequantSubBlock<TensorType::BF16>(const uint8_t* row, int64_t s, float* y) {
  // bfloat16 is the top half of a float.
  const uint8_t* h = row + s * 64;
  for (int l = 0; l < 32; ++l) y[l] = floatFromBits(load2(h + 2 * l) << 16);
}
template <>
SHOAL_HD void dequantSubBlock<TensorType::F32>(const uint8_t* row, int64_t s, float* y) {
  const uint8_t* f = row + s * 128;
  for (int l = 0; l < 32; ++l) y[l] = loadF32(f + 4 * l);
}

// The dequantizers' outputs: f32 as is (the embedding lookup), f16 rounded to nearest even (the
// cuBLAS path of batches).
SHOAL_HD void storeOut(float* p, float v) { *p = v; }
SHOAL_HD void storeOut(__half* p, float v) { *p = __float2half_rn(v); }

// Sub-block s of a row as 32 values of Out.
template <TensorType T, typename Out>
SHOAL_HD void dequantSubBlockTo(const uint8_t* row, int64_t s, Out* out) {
  float v[32];
  dequantSubBlock<T>(row, s, v);
  for (int l = 0; l < 32; ++l) storeOut(out + l, v[l]);
}

// Every quantized type above (X(name) per type), for switch statements over them.
// clang-format off
#define SHOAL_CUDA_QUANT_TYPES(X)                                 \
  X(Q4_0) X(Q4_1) X(Q5_0) X(Q5_1) X(Q8_0) X(IQ4_NL) X(MXFP4)      \
  X(Q2_K) X(Q3_K) X(Q4_K) X(Q5_K) X(Q6_K) X(IQ4_XS)
// clang-format on
// The float types, which the mat-vec reads against float activations.
#define SHOAL_CUDA_FLOAT_TYPES(X) X(F16) X(BF16) X(F32)

}  // namespace shoal::cuda
