#pragma once
// The AVX-512 VNNI prefill kernel for Q4_0 and Q8_0 weights: pairs of bands of 16 rows, one
// row per lane, in ggml's vec order (these types have only that order, tinyBLAS_Q0_AVX
// accumulating as vec_dot does: kernel_table.h).
//
// ggml's order keeps, per row and token, eight float lanes: lane k gets fma(d_w * d_a, exact
// dot of elements 4k..4k+3 of the block, lane) block by block, and the eight are summed as
// hsum_float_8 at the end. Here lane k of 16 rows is one zmm, so a token holds 8 zmm per band,
// and each group of 4 elements costs one vpdpbusd, one conversion and one fma for 16 rows. The
// weights are unpacked per chunk of 16 blocks into unsigned 8-bit codes (Q4_0 stores q + 8,
// Q8_0's q is given + 128), interleaved four elements per row; the activations are broadcast
// straight from their Q8_0 blocks; each group's dot starts from -bias * (sum of the token's 4
// activations), which takes the codes' bias off exactly. Two bands share each broadcast, and the
// starting sums come from a small per-token table rather than per row: the kernel was bound by
// loads, and these cut them from 2.5 to 2 per vpdpbusd (1.6x the pair kernel of
// avx512_quant_gemm.cpp per thread on Zen 5).
//
// Included by avx512_quant_gemm.cpp only (anonymous namespace, AVX-512 flags).

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx512_tile_helpers.h"
#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/kernel_table.h"

namespace shoal::cpu {
namespace {

constexpr int kQ0ChunkBlocks = 16;  // blocks unpacked at a time: 2 bands' tiles (18 KB) in L1
constexpr int kQ0Tokens = 64;       // tokens whose lanes a band pair keeps (on the stack)

// One chunk of 16 rows, unpacked.
struct Q0BandTile {
  alignas(64) int32_t codes[kQ0ChunkBlocks][8][16];  // [block][k][row]: elements 4k..4k+3, u8
  alignas(64) float d[kQ0ChunkBlocks][16];
};

// Two consecutive blocks of one row as 64 unsigned codes in element order (when there is no
// second block in the chunk, its half is left unread and unused).
inline __m512i q0Codes(const BlockQ4_0* x, bool second) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[0].qs));
  const __m128i b =
      second ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[1].qs)) : _mm_setzero_si128();
  const __m256i ab = _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
  const __m256i lo = _mm256_and_si256(ab, _mm256_set1_epi8(0xF));
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(ab, 4), _mm256_set1_epi8(0xF));
  // [a low, a high, b low, b high] = elements 0..31 of block a, then of block b.
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_permute2x128_si256(lo, hi, 0x20)),
                            _mm256_permute2x128_si256(lo, hi, 0x31), 1);
}
inline __m512i q0Codes(const BlockQ8_0* x, bool second) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[0].qs));
  const __m256i b = second ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[1].qs))
                           : _mm256_setzero_si256();
  return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1),
                          _mm512_set1_epi8(static_cast<char>(0x80)));
}
// The codes' bias: Q4_0 stores q + 8, Q8_0 is given q + 128 (q0Codes).
inline constexpr int biasShift(const BlockQ4_0*) { return 3; }
inline constexpr int biasShift(const BlockQ8_0*) { return 7; }

// Blocks [b0, b0 + n) of 16 rows into the tile.
template <class W>
void unpackQ0Band(const W* const* rows, int64_t b0, int n, Q0BandTile& tile) {
  for (int j = 0; j < n; j += 2) {
    __m512i m[16];
    for (int r = 0; r < 16; ++r) m[r] = q0Codes(rows[r] + b0 + j, j + 1 < n);
    transpose16x16(m);  // m[g]: group g % 8 of block j + g / 8, the 16 rows in the lanes
    for (int g = 0; g < 16 && j + g / 8 < n; ++g) {
      const int blk = j + g / 8, k = g % 8;
      _mm512_store_si512(reinterpret_cast<__m512i*>(tile.codes[blk][k]), m[g]);
    }
  }
  for (int j = 0; j < n; ++j) {
    for (int r = 0; r < 16; ++r) tile.d[j][r] = _cvtsh_ss(rows[r][b0 + j].d);
  }
}

// Rows [r0, r0 + 32) for every token: two bands, 8 lanes each per token.
template <class W>
void q0Bands(const GemmArgs& g, int64_t r0) {
  const int64_t blocks = g.cols / 32;
  const W* rows[2][16];
  for (int h = 0; h < 2; ++h) {
    for (int r = 0; r < 16; ++r) {
      rows[h][r] = reinterpret_cast<const W*>(g.weights + static_cast<size_t>(r0 + 16 * h + r) *
                                                              g.weightStride);
    }
  }
  constexpr int kShift = biasShift(static_cast<const W*>(nullptr));
  alignas(64) float lanes[kQ0Tokens][2][8][16];
  Q0BandTile tiles[2];
  for (int64_t t0 = 0; t0 < g.tokens; t0 += kQ0Tokens) {
    const int nt = static_cast<int>(g.tokens - t0 < kQ0Tokens ? g.tokens - t0 : kQ0Tokens);
    std::memset(lanes, 0, sizeof lanes[0] * static_cast<size_t>(nt));
    for (int64_t b0 = 0; b0 < blocks; b0 += kQ0ChunkBlocks) {
      const int n = static_cast<int>(blocks - b0 < kQ0ChunkBlocks ? blocks - b0 : kQ0ChunkBlocks);
      for (int h = 0; h < 2; ++h) unpackQ0Band(rows[h], b0, n, tiles[h]);
      for (int t = 0; t < nt; ++t) {
        const auto* y =
            reinterpret_cast<const BlockQ8_0*>(g.act + static_cast<size_t>(t0 + t) * g.actStride) +
            b0;
        // Each group's dot starts from -bias * (sum of its 4 activations), which takes the
        // codes' bias off exactly; and the token's block scales.
        alignas(64) int32_t init[kQ0ChunkBlocks][8];
        float da[kQ0ChunkBlocks];
        for (int j = 0; j < n; ++j) {
          const __m256i sums =
              _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1),
                                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[j].qs)));
          _mm256_store_si256(
              reinterpret_cast<__m256i*>(init[j]),
              _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sums, kShift)));
          da[j] = _cvtsh_ss(y[j].d);
        }
        __m512 acc[2][8];
        for (int h = 0; h < 2; ++h)
          for (int k = 0; k < 8; ++k) acc[h][k] = _mm512_load_ps(lanes[t][h][k]);
        for (int j = 0; j < n; ++j) {
          const __m512 dy = _mm512_set1_ps(da[j]);
          const __m512 d0 = _mm512_mul_ps(_mm512_load_ps(tiles[0].d[j]), dy);
          const __m512 d1 = _mm512_mul_ps(_mm512_load_ps(tiles[1].d[j]), dy);
          for (int k = 0; k < 8; ++k) {
            const __m512i a = _mm512_set1_epi32(load32(y[j].qs + 4 * k));
            const __m512i start = _mm512_set1_epi32(init[j][k]);
            const __m512i s0 =
                _mm512_dpbusd_epi32(start, _mm512_load_si512(tiles[0].codes[j][k]), a);
            const __m512i s1 =
                _mm512_dpbusd_epi32(start, _mm512_load_si512(tiles[1].codes[j][k]), a);
            acc[0][k] = _mm512_fmadd_ps(d0, _mm512_cvtepi32_ps(s0), acc[0][k]);
            acc[1][k] = _mm512_fmadd_ps(d1, _mm512_cvtepi32_ps(s1), acc[1][k]);
          }
        }
        for (int h = 0; h < 2; ++h)
          for (int k = 0; k < 8; ++k) _mm512_store_ps(lanes[t][h][k], acc[h][k]);
      }
    }
    // hsum_float_8 per row: ((l4 + l0) + (l6 + l2)) + ((l5 + l1) + (l7 + l3)).
    for (int t = 0; t < nt; ++t) {
      for (int h = 0; h < 2; ++h) {
        const float(*l)[16] = lanes[t][h];
        auto v = [l](int k) { return _mm512_load_ps(l[k]); };
        const __m512 sum =
            _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(v(4), v(0)), _mm512_add_ps(v(6), v(2))),
                          _mm512_add_ps(_mm512_add_ps(v(5), v(1)), _mm512_add_ps(v(7), v(3))));
        _mm512_storeu_ps(g.y + (t0 + t) * g.ldy + r0 + 16 * h, sum);
      }
    }
  }
}

}  // namespace
}  // namespace shoal::cpu
