#pragma once
// C structs for the ggml quantization blocks the CPU kernels compute with. Byte layouts are
// ggml's (ggml/src/ggml-common.h) and are documented with the dequantizers in
// engine/gguf/dequantize.cpp; the static_asserts pin the sizes.

#include <cstdint>

namespace shoal::cpu {

constexpr int kQK = 32;    // elements per block of the 32-element formats
constexpr int kQKK = 256;  // elements per K-quant super-block

struct BlockQ4_0 {
  uint16_t d;      // f16 scale
  uint8_t qs[16];  // low nibbles: elements 0..15, high nibbles: 16..31; value = q - 8
};
struct BlockMXFP4 {
  uint8_t e;       // E8M0 shared exponent; scale = 2^(e - 128) (levels are stored doubled)
  uint8_t qs[16];  // nibbles as Q4_0, each an index into the E2M1 levels (kMxfp4Values)
};
struct BlockQ4_1 {
  uint16_t d, m;  // f16 scale and minimum; value = d * q + m
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];   // fifth bit of element j is bit j of qh
  uint8_t qs[16];  // value = (nibble | fifth bit << 4) - 16
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockQ8_1 {
  uint16_t d;  // f16 scale
  uint16_t s;  // f16 of d * sum(qs): lets dot products with Q4_1/Q5_1 add the minimum cheaply
  int8_t qs[32];
};
struct BlockQ4_K {
  uint16_t d, dmin;    // super-block scales for the 6-bit sub-block scales and minimums
  uint8_t scales[12];  // 8 × (6-bit scale, 6-bit min), packed
  uint8_t qs[128];     // 4-bit values; each 32 bytes hold two sub-blocks (low, high nibbles)
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];  // fifth bits
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];    // low 4 bits
  uint8_t qh[64];     // high 2 bits
  int8_t scales[16];  // 8-bit scale per 16 elements
  uint16_t d;
};
struct BlockQ2_K {
  uint8_t scales[16];  // per 16 elements: low nibble the scale, high nibble the minimum
  uint8_t qs[64];      // 2-bit quants: element 128h + 32g + l is bits 2g..2g+1 of qs[32h + l]
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[32];   // element 128h + 32g + l has its third bit in bit 4h + g of hmask[l]
  uint8_t qs[64];      // low 2 bits, laid out as Q2_K's
  uint8_t scales[12];  // 16 6-bit scales, biased by 32 (q3KScale)
  uint16_t d;
};
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scalesHigh;   // top 2 bits of sub-block s's 6-bit scale at bits 2s..2s+1
  uint8_t scalesLow[4];  // low 4 bits: sub-block s in nibble s % 2 of byte s / 2
  uint8_t qs[128];       // per 32-element sub-block 16 bytes, nibbles as IQ4_NL's
};
struct BlockQ8_K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];  // sum of each group of 16 qs, for the K-quant minimums
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockIQ4_XS) == 136);

// The signed scale of Q3_K sub-block s (0..15): low 4 bits from byte s (s < 8, low nibble) or
// s - 8 (high nibble), top 2 bits from bits 2(s/4).. of byte 8 + s % 4, minus 32. Static: one
// copy per instruction set (see ggml_order.h).
static inline int q3KScale(const uint8_t packed[12], int s) {
  const int low = s < 8 ? (packed[s] & 0x0f) : (packed[s - 8] >> 4);
  const int high = (packed[8 + s % 4] >> (2 * (s / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// The signed scale of IQ4_XS sub-block s (0..7), minus 32.
static inline int iq4XsScale(const BlockIQ4_XS& b, int s) {
  const int low = (b.scalesLow[s / 2] >> (4 * (s % 2))) & 0xf;
  const int high = (b.scalesHigh >> (2 * s)) & 3;
  return (low | (high << 4)) - 32;
}

// The 6-bit scale and minimum of sub-block j (0..7) of a Q4_K/Q5_K super-block: the first four
// use the low 6 bits of bytes 0..3 (scales) and 4..7 (mins); the last four take their low 4 bits
// from bytes 8..11 and their top 2 bits from the spare top bits of bytes 0..7. Static, as above.
static inline void kQuantScaleMin(int j, const uint8_t* q, uint8_t& scale, uint8_t& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace shoal::cpu
