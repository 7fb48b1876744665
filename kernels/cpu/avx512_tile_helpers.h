#pragma once
// Helpers of the AVX-512 band kernels (avx512_kquant_bands.h, avx512_quant_bands.h): compiled
// with the AVX-512 flags of the files that include them, in an anonymous namespace (see
// x86_kquant_kernels.h).

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace shoal::cpu {
namespace {

inline int32_t load32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// In-register transpose of 16 rows of 16 int32 (r[i] lane j -> r[j] lane i).
inline void transpose16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // Now r[4a + c] holds, in its 128-bit lane q, rows 4a..4a+3 at column 4q + c. For each c, a
  // 4x4 transpose of 128-bit lanes across r[c], r[4 + c], r[8 + c], r[12 + c] leaves column
  // 4q + c of all 16 rows in r[4q + c] (0x88 takes lanes 0 and 2 of both sources, 0xDD 1 and 3).
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);      // lanes 0, 2 of each
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xDD);  // lanes 1, 3
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xDD);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xDD);
    r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xDD);
  }
}

}  // namespace
}  // namespace shoal::cpu
