// Weight decoding for one GGUF type, chosen by a WTYPE_<type> define. Layouts as in
// engine/gguf/dequantize.cpp (and kernels/cpu/block_layouts.h):
//   QK            elements per block, BLOCK_BYTES bytes per block
//   dq(w, h, base, j)  element j of the block starting at byte `base`
// w views the weights as bytes, h the same memory as 16-bit words (f16 fields are 2-aligned).

float half_at(Halves h, uint byteOffset) { return unpackHalf2x16(uint(h.v[byteOffset >> 1])).x; }
uint u8_at(Bytes w, uint byteOffset) { return uint(w.v[byteOffset]); }

#if defined(WTYPE_F32)
#define QK 1
#define BLOCK_BYTES 4
float dq(Bytes w, Halves h, uint base, uint j) {
  return uintBitsToFloat(u8_at(w, base) | (u8_at(w, base + 1) << 8) | (u8_at(w, base + 2) << 16) |
                         (u8_at(w, base + 3) << 24));
}
#elif defined(WTYPE_F16)
#define QK 1
#define BLOCK_BYTES 2
float dq(Bytes w, Halves h, uint base, uint j) { return half_at(h, base); }
#elif defined(WTYPE_Q8_0)
// f16 d | i8 qs[32]
#define QK 32
#define BLOCK_BYTES 34
float dq(Bytes w, Halves h, uint base, uint j) {
  return half_at(h, base) * float(int(int8_t(w.v[base + 2 + j])));
}
#elif defined(WTYPE_Q4_0)
// f16 d | u8 qs[16]: element j < 16 is the low nibble of qs[j], j >= 16 the high nibble of
// qs[j - 16]; x = d * (q - 8)
#define QK 32
#define BLOCK_BYTES 18
float dq(Bytes w, Halves h, uint base, uint j) {
  const uint b = u8_at(w, base + 2 + (j & 15u));
  const int q = int(j < 16u ? (b & 15u) : (b >> 4)) - 8;
  return half_at(h, base) * float(q);
}
#elif defined(WTYPE_Q4_1)
// f16 d | f16 m | u8 qs[16]; x = d * q + m
#define QK 32
#define BLOCK_BYTES 20
float dq(Bytes w, Halves h, uint base, uint j) {
  const uint b = u8_at(w, base + 4 + (j & 15u));
  const uint q = j < 16u ? (b & 15u) : (b >> 4);
  return half_at(h, base) * float(q) + half_at(h, base + 2);
}
#elif defined(WTYPE_Q4_K)
// f16 d | f16 dmin | u8 scales[12] | u8 qs[128]; x = (d*sc)*q - dmin*m per 32-element sub-block
#define QK 256
#define BLOCK_BYTES 144
float dq(Bytes w, Halves h, uint base, uint j) {
  const uint chunk = j >> 6, l = j & 63u;
  const uint sub = 2u * chunk + (l >> 5);
  const uint sc0 = base + 4;
  uint sc, m;
  if (sub < 4u) {
    sc = u8_at(w, sc0 + sub) & 63u;
    m = u8_at(w, sc0 + sub + 4u) & 63u;
  } else {
    sc = (u8_at(w, sc0 + sub + 4u) & 15u) | ((u8_at(w, sc0 + sub - 4u) >> 6) << 4);
    m = (u8_at(w, sc0 + sub + 4u) >> 4) | ((u8_at(w, sc0 + sub) >> 6) << 4);
  }
  const uint b = u8_at(w, base + 16u + 32u * chunk + (l & 31u));
  const uint q = l < 32u ? (b & 15u) : (b >> 4);
  return (half_at(h, base) * float(sc)) * float(q) - half_at(h, base + 2) * float(m);
}
#elif defined(WTYPE_Q6_K)
// u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d; x = d * sc * (q - 32)
#define QK 256
#define BLOCK_BYTES 210
float dq(Bytes w, Halves h, uint base, uint j) {
  const uint half_ = j >> 7, r = j & 127u;
  const uint quad = r >> 5, l = r & 31u;
  const uint ql = u8_at(w, base + 64u * half_ + l + ((quad & 1u) != 0u ? 32u : 0u));
  const uint qh = u8_at(w, base + 128u + 32u * half_ + l);
  const uint lo = quad < 2u ? (ql & 15u) : (ql >> 4);
  const int q = int(lo | (((qh >> (2u * quad)) & 3u) << 4)) - 32;
  const int sc = int(int8_t(w.v[base + 192u + 8u * half_ + (l >> 4) + 2u * quad]));
  return half_at(h, base + 208u) * float(sc) * float(q);
}
#elif defined(WTYPE_MXFP4)
// u8 e (E8M0 scale) | u8 qs[16], nibbles as Q4_0, each an index into the doubled E2M1 values;
// x = value * 2^(e - 128) (ggml's GGML_E8M0_TO_FP32_HALF, denormal below e = 2)
#define QK 32
#define BLOCK_BYTES 17
const float kMxfp4[16] = float[16](0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0,
                                   0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0);
float dq(Bytes w, Halves h, uint base, uint j) {
  const uint e = u8_at(w, base);
  const float d = uintBitsToFloat(e < 2u ? (0x00200000u << e) : ((e - 1u) << 23));
  const uint b = u8_at(w, base + 1u + (j & 15u));
  return kMxfp4[j < 16u ? (b & 15u) : (b >> 4)] * d;
}
#else
#error "define one WTYPE_<type>"
#endif
