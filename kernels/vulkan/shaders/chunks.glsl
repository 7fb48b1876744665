// 32 consecutive weights of a row decoded at once, for the block mat-vec (matvec_block.comp):
//   chunk32(b, h, row, c, w)   elements 32c .. 32c + 31 of the row starting at byte `row`, as
//                              w[k] = elements 32c + 4k .. 32c + 4k + 3
// or, for Q4_0, Q4_1 and Q8_0 (Q8_ACTIVATIONS), quants32 below: the quants as integers.
// A chunk is a whole block of the 32-element types and one 32-element sub-block of the K-quants,
// so its scale, minimum and high bits are read once for 32 weights, and its quants as 32-bit
// words (two aligned 16-bit loads: GGUF blocks are only 2-byte aligned) unpacked four at a time.
// Layouts as in blocks.glsl (which this needs for QK, BLOCK_BYTES and the per-element dq of the
// types decoded element by element here: Q2_K, Q3_K, IQ4_XS, MXFP4).

uint h16(Halves h, uint byteOffset) { return uint(h.v[byteOffset >> 1]); }
uint w32(Halves h, uint byteOffset) { return h16(h, byteOffset) | (h16(h, byteOffset + 2u) << 16); }
float f16(Halves h, uint byteOffset) { return unpackHalf2x16(h16(h, byteOffset)).x; }
uint byteOf(Halves h, uint byteOffset) {
  return (h16(h, byteOffset & ~1u) >> (8u * (byteOffset & 1u))) & 0xffu;
}
// Bits 0..3 of `bits` moved to bit 4 of bytes 0..3 (the 5th bit of four Q5 quants).
uint spread4(uint bits) {
  return ((bits & 1u) | ((bits & 2u) << 7) | ((bits & 4u) << 14) | ((bits & 8u) << 21)) << 4;
}

#if defined(WTYPE_Q4_0) || defined(WTYPE_Q4_1) || defined(WTYPE_Q8_0)
// The types whose products take 8-bit activations (as the CPU backend and llama.cpp's integer
// kernels do): their quants as integers instead of decoded floats.
//   quants32(h, row, c, q, d, m)   block c's 32 quants, q[k] = quants 4k .. 4k + 3 (Q4_0's
//                                  offset of 8 taken off), its scale d and (Q4_1) minimum m
#define Q8_ACTIVATIONS 1
void quants32(Halves h, uint row, uint c, out ivec4 q[8], out float d, out float m) {
  const uint base = row + c * BLOCK_BYTES;
  d = f16(h, base);
  m = 0.0;
#if defined(WTYPE_Q8_0)
  // f16 d | i8 qs[32]
  for (uint k = 0; k < 8u; ++k) q[k] = ivec4(unpack8(int(w32(h, base + 2u + 4u * k))));
#else
  // Q4_0: f16 d | qs[16], x = d * (q - 8); Q4_1: f16 d | f16 m | qs[16], x = d * q + m. Element
  // j < 16 is the low nibble of qs[j], j >= 16 the high nibble of qs[j - 16].
#if defined(WTYPE_Q4_0)
  const ivec4 offset = ivec4(8);
  const uint qs = base + 2u;
#else
  const ivec4 offset = ivec4(0);
  m = f16(h, base + 2u);
  const uint qs = base + 4u;
#endif
  for (uint k = 0; k < 4u; ++k) {
    const uint word = w32(h, qs + 4u * k);
    q[k] = ivec4(unpack8(word & 0x0f0f0f0fu)) - offset;
    q[k + 4u] = ivec4(unpack8((word >> 4) & 0x0f0f0f0fu)) - offset;
  }
#endif
}
#elif defined(WTYPE_Q5_0) || defined(WTYPE_Q5_1)
// Q4_0's (Q4_1's) nibbles plus a 5th bit per element: bit j of the u32 qh after the scale(s).
// Q5_0: x = d * (q - 16); Q5_1: x = d * q + m.
void chunk32(Bytes b, Halves h, uint row, uint c, out vec4 w[8]) {
  const uint base = row + c * BLOCK_BYTES;
  const float d = f16(h, base);
#if defined(WTYPE_Q5_0)
  const float m = -16.0 * d;
#else
  const float m = f16(h, base + 2u);
#endif
  const uint qh = w32(h, base + Q5_HEAD), qs = base + Q5_HEAD + 4u;
  for (uint k = 0; k < 4u; ++k) {
    const uint q = w32(h, qs + 4u * k);
    const uint lo = (q & 0x0f0f0f0fu) | spread4(qh >> (4u * k));
    const uint hi = ((q >> 4) & 0x0f0f0f0fu) | spread4(qh >> (16u + 4u * k));
    w[k] = fma(vec4(d), vec4(unpack8(lo)), vec4(m));
    w[k + 4u] = fma(vec4(d), vec4(unpack8(hi)), vec4(m));
  }
}
#elif defined(WTYPE_IQ4_NL)
// Q4_0's nibbles as indices into the non-linear values; x = d * value
void chunk32(Bytes b, Halves h, uint row, uint c, out vec4 w[8]) {
  const uint base = row + c * BLOCK_BYTES;
  const float d = f16(h, base);
  for (uint k = 0; k < 4u; ++k) {
    const uint q = w32(h, base + 2u + 4u * k);
    for (uint i = 0; i < 4u; ++i) {
      w[k][i] = d * kIq4Nl[(q >> (8u * i)) & 15u];
      w[k + 4u][i] = d * kIq4Nl[(q >> (8u * i + 4u)) & 15u];
    }
  }
}
#elif defined(WTYPE_Q4_K) || defined(WTYPE_Q5_K)
// Sub-block s (0..7) of a 256-element block: f16 d | f16 dmin | scales[12] | (Q5_K: qh[32]) |
// qs[128]; its quants are the low (s even) or high nibbles of qs[32 (s / 2) ..], plus for Q5_K
// bit s of qh[l] as the 5th bit of element l; x = (d * sc) * q - dmin * m with the 6-bit sc and
// m of sub-block s (ggml's get_scale_min_k4).
void chunk32(Bytes b, Halves h, uint row, uint c, out vec4 w[8]) {
  const uint base = row + (c >> 3) * BLOCK_BYTES, s = c & 7u;
  uint sc, m;
  if (s < 4u) {
    sc = byteOf(h, base + 4u + s) & 63u;
    m = byteOf(h, base + 8u + s) & 63u;
  } else {
    sc = (byteOf(h, base + 8u + s) & 15u) | ((byteOf(h, base + s) >> 6) << 4);
    m = (byteOf(h, base + 8u + s) >> 4) | ((byteOf(h, base + 4u + s) >> 6) << 4);
  }
  const float scale = f16(h, base) * float(sc), minimum = f16(h, base + 2u) * float(m);
  const uint shift = 4u * (s & 1u);
#if defined(WTYPE_Q4_K)
  const uint qs = base + 16u + 32u * (s >> 1);
#else
  const uint qs = base + 48u + 32u * (s >> 1);
#endif
  for (uint k = 0; k < 8u; ++k) {
    uint q = (w32(h, qs + 4u * k) >> shift) & 0x0f0f0f0fu;
#if defined(WTYPE_Q5_K)
    q |= ((w32(h, base + 16u + 4u * k) >> s) & 0x01010101u) << 4;
#endif
    w[k] = fma(vec4(scale), vec4(unpack8(q)), vec4(-minimum));
  }
}
#elif defined(WTYPE_Q6_K)
// ql[128] | qh[64] | i8 scales[16] | f16 d. Chunk c (0..7) of a block: half hf = c / 4 and
// quarter r = c % 4 of it; element l: the low (r < 2) or high nibble of ql[64 hf + 32 (r % 2) + l]
// and bits 2r of qh[32 hf + l] on top; x = d * scales[8 hf + 2r + l / 16] * (q - 32).
void chunk32(Bytes b, Halves h, uint row, uint c, out vec4 w[8]) {
  const uint base = row + (c >> 3) * BLOCK_BYTES, cc = c & 7u, hf = cc >> 2, r = cc & 3u;
  const uint ql = base + 64u * hf + 32u * (r & 1u), qh = base + 128u + 32u * hf;
  const uint sc = base + 192u + 8u * hf + 2u * r;
  const float d = f16(h, base + 208u);
  const float s0 = d * float(bitfieldExtract(int(byteOf(h, sc)), 0, 8));
  const float s1 = d * float(bitfieldExtract(int(byteOf(h, sc + 1u)), 0, 8));
  for (uint k = 0; k < 8u; ++k) {
    const uint q = ((w32(h, ql + 4u * k) >> (4u * (r >> 1))) & 0x0f0f0f0fu) |
                   (((w32(h, qh + 4u * k) >> (2u * r)) & 0x03030303u) << 4);
    w[k] = (k < 4u ? s0 : s1) * (vec4(unpack8(q)) - 32.0);
  }
}
#elif defined(WTYPE_F16)
void chunk32(Bytes b, Halves h, uint row, uint c, out vec4 w[8]) {
  const uint base = row + 64u * c;
  for (uint k = 0; k < 8u; ++k) {
    w[k] = vec4(unpackHalf2x16(w32(h, base + 8u * k)), unpackHalf2x16(w32(h, base + 8u * k + 4u)));
  }
}
#elif defined(WTYPE_F32)
void chunk32(Bytes b, Halves h, uint row, uint c, out vec4 w[8]) {
  const uint base = row + 128u * c;
  for (uint k = 0; k < 8u; ++k) {
    for (uint i = 0; i < 4u; ++i) w[k][i] = uintBitsToFloat(w32(h, base + 16u * k + 4u * i));
  }
}
#else
// The rest element by element (blocks.glsl's dq): Q2_K, Q3_K, IQ4_XS, MXFP4.
void chunk32(Bytes b, Halves h, uint row, uint c, out vec4 w[8]) {
  for (uint e = 0; e < 32u; ++e) {
    const uint j = 32u * c + e;
    w[e >> 2][e & 3u] = dq(b, h, row + (j / QK) * BLOCK_BYTES, j % QK);
  }
}
#endif
