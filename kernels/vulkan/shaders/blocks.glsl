// Weight decoding for one GGUF type, chosen by a WTYPE_<type> define. Layouts as in
// engine/gguf/dequantize.cpp (and kernels/cpu/block_layouts.h):
//   QK            elements per block, BLOCK_BYTES bytes per block
//   dq(w, h, base, j)  element j of the block starting at byte `base`
// w views the weights as bytes, h the same memory as 16-bit words (f16 fields are 2-aligned).

float half_at(Halves h, uint byteOffset) { return unpackHalf2x16(uint(h.v[byteOffset >> 1])).x; }
uint u8_at(Bytes w, uint byteOffset) { return uint(w.v[byteOffset]); }

// The 6-bit scale and min of sub-block `sub` (0..7) from the 12 packed bytes at `sc0` (Q4_K,
// Q5_K: ggml's get_scale_min_k4).
void scaleMinK4(Bytes w, uint sc0, uint sub, out uint sc, out uint m) {
  if (sub < 4u) {
    sc = u8_at(w, sc0 + sub) & 63u;
    m = u8_at(w, sc0 + sub + 4u) & 63u;
  } else {
    sc = (u8_at(w, sc0 + sub + 4u) & 15u) | ((u8_at(w, sc0 + sub - 4u) >> 6) << 4);
    m = (u8_at(w, sc0 + sub + 4u) >> 4) | ((u8_at(w, sc0 + sub) >> 6) << 4);
  }
}

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
  uint sc, m;
  scaleMinK4(w, base + 4u, sub, sc, m);
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
#elif defined(WTYPE_Q5_0) || defined(WTYPE_Q5_1)
// Q5_0: f16 d | u32 qh | u8 qs[16]; x = d * (q - 16)
// Q5_1: f16 d | f16 m | u32 qh | u8 qs[16]; x = d * q + m
// The low 4 bits as Q4_0's nibbles; bit j of qh is element j's 5th bit.
#define QK 32
#if defined(WTYPE_Q5_0)
#define BLOCK_BYTES 22
#define Q5_HEAD 2u
#else
#define BLOCK_BYTES 24
#define Q5_HEAD 4u
#endif
float dq(Bytes w, Halves h, uint base, uint j) {
  const uint qhByte = u8_at(w, base + Q5_HEAD + (j >> 3));
  const uint b = u8_at(w, base + Q5_HEAD + 4u + (j & 15u));
  const uint q = (j < 16u ? (b & 15u) : (b >> 4)) | (((qhByte >> (j & 7u)) & 1u) << 4);
#if defined(WTYPE_Q5_0)
  return half_at(h, base) * float(int(q) - 16);
#else
  return half_at(h, base) * float(q) + half_at(h, base + 2);
#endif
}
#elif defined(WTYPE_IQ4_NL) || defined(WTYPE_IQ4_XS)
// The non-linear 4-bit values of both (kIq4NlValues).
const float kIq4Nl[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
                                   1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
#if defined(WTYPE_IQ4_NL)
// f16 d | u8 qs[16], nibbles as Q4_0; x = d * value
#define QK 32
#define BLOCK_BYTES 18
float dq(Bytes w, Halves h, uint base, uint j) {
  const uint b = u8_at(w, base + 2u + (j & 15u));
  return half_at(h, base) * kIq4Nl[j < 16u ? (b & 15u) : (b >> 4)];
}
#else
// f16 d | u16 scales_h | u8 scales_l[4] | u8 qs[128]: 8 sub-blocks of 32, each with a 6-bit
// scale ls (low 4 bits: nibble s % 2 of scales_l[s / 2]; top 2: bits 2s of scales_h) and 16
// bytes of IQ4_NL nibbles; x = d * (ls - 32) * value
#define QK 256
#define BLOCK_BYTES 136
float dq(Bytes w, Halves h, uint base, uint j) {
  const uint s = j >> 5, l = j & 31u;
  const uint high = uint(h.v[(base + 2u) >> 1]);
  const uint ls = ((u8_at(w, base + 4u + (s >> 1)) >> (4u * (s & 1u))) & 15u) |
                  (((high >> (2u * s)) & 3u) << 4);
  const uint b = u8_at(w, base + 8u + 16u * s + (l & 15u));
  return half_at(h, base) * float(int(ls) - 32) * kIq4Nl[l < 16u ? (b & 15u) : (b >> 4)];
}
#endif
#elif defined(WTYPE_Q2_K)
// u8 scales[16] | u8 qs[64] | f16 d | f16 dmin: 16 sub-blocks of 16 (scale in the low nibble of
// scales[s], min in the high one); element 32k + l of 128-element half hf is bits 2k..2k+1 of
// qs[32 hf + l]; x = d * sc * q - dmin * m
#define QK 256
#define BLOCK_BYTES 84
float dq(Bytes w, Halves h, uint base, uint j) {
  const uint hf = j >> 7, r = j & 127u, k = r >> 5, l = r & 31u;
  const uint sc = u8_at(w, base + 8u * hf + 2u * k + (l >> 4));
  const uint q = (u8_at(w, base + 16u + 32u * hf + l) >> (2u * k)) & 3u;
  return half_at(h, base + 80u) * float(sc & 15u) * float(q) -
         half_at(h, base + 82u) * float(sc >> 4);
}
#elif defined(WTYPE_Q3_K)
// u8 hmask[32] | u8 qs[64] | u8 scales[12] | f16 d: 16 sub-blocks of 16 with 6-bit scales
// stored + 32 (low 4 bits in scales[s] or the high nibble of scales[s - 8], top 2 at bits
// 2 (s / 4) of scales[8 + s % 4]); element 32k + l of half hf: bits 2k of qs[32 hf + l], minus 4
// when bit 4 hf + k of hmask[l] is clear; x = d * (scale - 32) * q
#define QK 256
#define BLOCK_BYTES 110
float dq(Bytes w, Halves h, uint base, uint j) {
  const uint hf = j >> 7, r = j & 127u, k = r >> 5, l = r & 31u;
  const uint s = 8u * hf + 2u * k + (l >> 4);
  const uint low = s < 8u ? (u8_at(w, base + 96u + s) & 15u) : (u8_at(w, base + 96u + s - 8u) >> 4);
  const uint top = (u8_at(w, base + 104u + (s & 3u)) >> (2u * (s >> 2))) & 3u;
  const int scale = int(low | (top << 4)) - 32;
  const int q = int((u8_at(w, base + 32u + 32u * hf + l) >> (2u * k)) & 3u) -
                ((u8_at(w, base + l) & (1u << (4u * hf + k))) != 0u ? 0 : 4);
  return half_at(h, base + 108u) * float(scale) * float(q);
}
#elif defined(WTYPE_Q5_K)
// f16 d | f16 dmin | u8 scales[12] | u8 qh[32] | u8 qs[128]: Q4_K's layout plus a 5th bit (bit
// 2c of qh[l] for the low-nibble element l of chunk c, bit 2c + 1 for the high one)
#define QK 256
#define BLOCK_BYTES 176
float dq(Bytes w, Halves h, uint base, uint j) {
  const uint chunk = j >> 6, l = j & 63u;
  const uint sub = 2u * chunk + (l >> 5);
  uint sc, m;
  scaleMinK4(w, base + 4u, sub, sc, m);
  const uint b = u8_at(w, base + 48u + 32u * chunk + (l & 31u));
  const uint hi = (u8_at(w, base + 16u + (l & 31u)) >> (2u * chunk + (l >> 5))) & 1u;
  const uint q = (l < 32u ? (b & 15u) : (b >> 4)) | (hi << 4);
  return (half_at(h, base) * float(sc)) * float(q) - half_at(h, base + 2) * float(m);
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
