#pragma once
// Internal helpers shared by dequantize.cpp and quantize.cpp: unaligned little-endian loads and
// stores, and the pieces of the k-quant layouts both directions need. Not part of the API.

#include <cstdint>
#include <cstring>

#include "engine/gguf/dequantize.h"

namespace shoal::gguf {

inline uint32_t floatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// GGUF is little-endian and so is every host Shoal supports, so a memcpy is a load.
inline uint16_t loadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline uint32_t loadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline float loadF32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// IQ4_NL's 16 non-linear levels (ggml-common.h kvalues_iq4nl), indexed by a block's nibbles.
inline constexpr int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// MXFP4's E2M1 levels doubled (ggml-common.h kvalues_mxfp4: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
// negatives, times 2), indexed by a block's nibbles; the scale below halves them back.
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// An MXFP4 block's E8M0 scale byte e as 2^(e - 127) / 2 (ggml_e8m0_to_fp32_half): the float
// with exponent field e - 1, or the subnormals 2^-128 and 2^-127 for e = 0 and 1.
inline float e8m0Half(uint8_t e) {
  return bitsToFloat(e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23);
}

inline float loadHalf(const uint8_t* p) { return halfToFloat(loadU16(p)); }

inline void storeU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, sizeof v); }
inline void storeU32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, sizeof v); }
inline void storeF32(uint8_t* p, float v) { std::memcpy(p, &v, sizeof v); }
inline void storeHalf(uint8_t* p, float v) { storeU16(p, floatToHalf(v)); }

// The 12 scale bytes of Q4_K/Q5_K hold 8 six-bit scales and 8 six-bit mins. Sub-blocks 0..3:
// scale = low 6 bits of bytes[j], min = low 6 bits of bytes[j+4]. Sub-blocks 4..7: the low 4 bits
// come from bytes[j+4] (scale: low nibble, min: high nibble) and the top 2 bits from the top 2
// bits of bytes[j-4] (scale) and bytes[j] (min). (ggml get_scale_min_k4.)
inline void decodeScaleMinK4(int j, const uint8_t* bytes, uint8_t& scale, uint8_t& min) {
  if (j < 4) {
    scale = bytes[j] & 63;
    min = bytes[j + 4] & 63;
  } else {
    scale = static_cast<uint8_t>((bytes[j + 4] & 0x0f) | ((bytes[j - 4] >> 6) << 4));
    min = static_cast<uint8_t>((bytes[j + 4] >> 4) | ((bytes[j] >> 6) << 4));
  }
}

}  // namespace shoal::gguf
