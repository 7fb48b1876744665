#pragma once
// The AVX-512 VNNI prefill kernel for K-quant weights (DotOrder::Tiled: Q4_K, Q5_K, Q6_K, Q3_K and
// IQ4_XS; the repacked orders, Repacked and RepackedGemm, of Q4_K and Q2_K): bands of 16 weight
// rows, one row per int32 lane, against the tokens' Q8_K activations broadcast four bytes at a
// time.
//
// Why this shape: the 8-row tiled kernel (x86_kquant_kernels.h) spends two multiplies
// (vpmaddubsw, vpdpwssd) per 64 products and reduces eight rows' lanes across registers per
// block; llama.cpp's tiled matmul (ggml-cpu/tiled) does one vpdpbusd per 64 and ran Q6_K
// prefill 1.4-1.5x faster than that kernel on Zen 5. Here the weights of a band are unpacked once
// per super-block into unsigned 8-bit codes, interleaved so that one zmm holds elements 4k..4k+3 of
// the 16 rows; one vpdpbusd multiplies it with four activation bytes of one token, so a zmm of
// int32 lanes is the 16 rows' sums for that token, with nothing to reduce. Each sub-block's sums
// take their scale with one vpmulld; the minimums (Q4_K, Q5_K) and Q6_K's -32 bias enter through
// vpdpwssd against the activation sums (bsums), and so do the offsets of the types with signed
// values (Q3_K's codes are value + 4, IQ4_XS's level + 128). Integer arithmetic is exact in any
// order, and the float epilogue is the order's, so every lane rounds exactly as the reference
// (reference_dots.cpp) does for its row: bit-identical. RepackedGemm fuses the totals of each of
// llama.cpp's gemm steps as it ends (Q4_K: two sub-blocks, Q2_K: eight) and the steps' minimum
// terms at the block's end (for Q4_K about 25% more time per row and token than the tiled order's
// one epilogue per block: cpu_kernels_bench --order repacked-gemm, 64 tokens).
//
// Included by avx512_kquant_gemm.cpp only (anonymous namespace, AVX-512 flags: see
// x86_kquant_kernels.h). A traits type K adds to that header's interface:
//   kSubBlocks                      sub-blocks per super-block (8 of 32, or 16 of 16 elements)
//   kGemmSubBlocks                  RepackedGemm's sub-blocks per fusion (Q4_K, Q2_K only)
//   bandScales(x, row, tile)        the row's scales, their pair terms, d and dmin into the tile

#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "kernels/cpu/avx512_tile_helpers.h"
#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/kernel_table.h"

namespace shoal::cpu {
namespace {

constexpr int kBandRows = 16;       // rows per band: one int32 lane each
constexpr int kBandTokens = 8;      // tokens per pass of one band: 2 x 8 zmm of running sums
constexpr int kBandTokens2 = 6;     // tokens per pass of two bands: 2 x 2 x 6 zmm
constexpr int kBandChunk = 256;     // tokens whose float sums a band keeps (on the stack)
constexpr int kCodeGroups = 64;     // groups of 4 elements in a super-block
constexpr int kPrefetchBlocks = 4;  // super-blocks ahead that unpackBand prefetches

// One super-block of a band, unpacked.
template <int kSubBlocks>
struct BandTile {
  alignas(64) uint32_t codes[kCodeGroups][kBandRows];  // elements 4g..4g+3 of each row, as u8
  alignas(64) int32_t scales[kSubBlocks][kBandRows];   // each sub-block's integer scale
  // Pairs of int16 for vpdpwssd against the activations' bsums: Q4_K/Q5_K the minimums of
  // sub-blocks 2p, 2p+1 (against the sums of their 32 elements), IQ4_XS -128 times their scales;
  // Q6_K -32 (Q3_K -4) times the scales of 16-element groups 2p, 2p+1 (against bsums 2p, 2p+1).
  alignas(64) int32_t pairs[kSubBlocks / 2][kBandRows];
  alignas(64) float d[kBandRows];
  alignas(64) float dmin[kBandRows];
};

// The band's 16 rows in file layout: row r's blocks at rows[r].
template <class Block>
struct FileRows {
  const Block* rows[16];
  const Block& block(int r, int64_t b, Block& /*scratch*/) const { return rows[r][b]; }
  void prefetch(int r, int64_t b) const {
    const auto* p = reinterpret_cast<const char*>(&rows[r][b]);
    for (size_t i = 0; i < sizeof(Block); i += 64) _mm_prefetch(p + i, _MM_HINT_T0);
  }
};

// Super-block b of the band's 16 rows (a row source as FileRows) into the tile.
template <class K, class Rows>
void unpackBand(const Rows& rows, int64_t b, int64_t blocks, BandTile<K::kSubBlocks>& tile) {
  static_assert(K::kSteps * K::kStepBytes == 256);
  // Each row's 256 codes in element order (one zmm per step), then 16x16 transposes of int32.
  alignas(64) uint8_t linear[kBandRows][256];
  for (int r = 0; r < kBandRows; ++r) {
    typename K::Block scratch;
    const typename K::Block& x = rows.block(r, b, scratch);
    // Super-block b + 4 of the row: the hardware prefetchers alone do not keep 16-32 row streams
    // ahead (measured 5-15% on a matrix in L3).
    if (b + kPrefetchBlocks < blocks) rows.prefetch(r, b + kPrefetchBlocks);
    typename K::Context c;
    __m128i mins;
    K::prepare(x, c, mins);
    for (int i = 0; i < K::kSteps; ++i) {
      __m512i q, scale;
      K::unpack(x, c, i, q, scale);
      _mm512_store_si512(reinterpret_cast<__m512i*>(linear[r] + 64 * i), q);
    }
    K::bandScales(x, r, tile);
  }
  for (int quarter = 0; quarter < 4; ++quarter) {
    __m512i m[16];
    for (int r = 0; r < kBandRows; ++r) {
      m[r] = _mm512_load_si512(reinterpret_cast<const __m512i*>(linear[r] + 64 * quarter));
    }
    transpose16x16(m);
    for (int g = 0; g < 16; ++g) {
      _mm512_store_si512(reinterpret_cast<__m512i*>(tile.codes[16 * quarter + g]), m[g]);
    }
  }
}

// The four pairs of a token's sub-block sums (bsums 2s + 2s+1) as int32 words, in every
// 128-bit lane: what the minimums multiply.
inline __m512i subBlockSumPairs(const BlockQ8_K& y) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(y.bsums));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(y.bsums + 8));
  return _mm512_broadcast_i32x4(_mm_hadd_epi16(lo, hi));
}

// The activation sums that tile.pairs[p] multiply: with 32-element sub-blocks (Q4_K, Q5_K,
// IQ4_XS) the sums of sub-blocks 2p, 2p+1 (from sums: subBlockSumPairs), with 16-element ones
// (Q6_K, Q3_K, Q2_K) bsums 2p, 2p+1.
template <class K>
inline __m512i pairActivations(const BlockQ8_K& y, __m512i sums, int p) {
  if constexpr (K::kSubBlocks == 8) {
    return _mm512_permutexvar_epi32(_mm512_set1_epi32(p), sums);
  } else {
    return _mm512_set1_epi32(load32(y.bsums + 2 * p));
  }
}

// The block's terms for one token and one tile, from its integer sums s1: acc (16 floats, row r
// in lane r) += them, rounded as the tiled order rounds them; in the repacked order (Q4_K, Q2_K),
// acc += s1 * (d_w * d_a) and accMin += s2 * (dmin_w * d_a), each fused. sums:
// subBlockSumPairs(y) for types with minimums or 32-element sub-blocks (unused otherwise).
template <class K, DotOrder kOrder>
inline void bandEpilogue(const BandTile<K::kSubBlocks>& tile, const BlockQ8_K& y, __m512i sums,
                         __m512i s1, float* acc, float* accMin) {
  __m512 r;
  if constexpr (K::kHasMin) {
    // s2 = sum of each sub-block's minimum times its activations' sum.
    __m512i s2 = _mm512_setzero_si512();
    for (int p = 0; p < K::kSubBlocks / 2; ++p) {
      s2 = _mm512_dpwssd_epi32(s2,
                               _mm512_load_si512(reinterpret_cast<const __m512i*>(tile.pairs[p])),
                               pairActivations<K>(y, sums, p));
    }
    if constexpr (kOrder != DotOrder::Tiled) {
      const __m512 da = _mm512_set1_ps(y.d);
      _mm512_store_ps(
          acc, _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(_mm512_load_ps(tile.d), da),
                               _mm512_load_ps(acc)));
      _mm512_store_ps(accMin, _mm512_fmadd_ps(_mm512_cvtepi32_ps(s2),
                                              _mm512_mul_ps(_mm512_load_ps(tile.dmin), da),
                                              _mm512_load_ps(accMin)));
      return;
    }
    r = _mm512_mul_ps(_mm512_cvtepi32_ps(s1), _mm512_load_ps(tile.d));
    r = _mm512_fnmadd_ps(_mm512_load_ps(tile.dmin), _mm512_cvtepi32_ps(s2), r);
  } else {
    // The offset of signed values (Q6_K's -32, Q3_K's -4 against each 16-element group's bsum,
    // IQ4_XS's -128 against each 32-element sub-block's sum): s1 += offset * scale * sum, two
    // groups per vpdpwssd.
    for (int p = 0; p < K::kSubBlocks / 2; ++p) {
      s1 = _mm512_dpwssd_epi32(s1,
                               _mm512_load_si512(reinterpret_cast<const __m512i*>(tile.pairs[p])),
                               pairActivations<K>(y, sums, p));
    }
    r = _mm512_mul_ps(_mm512_cvtepi32_ps(s1), _mm512_load_ps(tile.d));
  }
  _mm512_store_ps(acc, _mm512_fmadd_ps(r, _mm512_set1_ps(y.d), _mm512_load_ps(acc)));
}

// N tokens against H unpacked tiles of one super-block (H bands of 16 rows side by side: each
// activation broadcast serves H products): acc[t][h] (and in the repacked order accMin[t][h])
// += the block's terms.
template <class K, int H, int N, DotOrder kOrder>
void bandTokens(const BandTile<K::kSubBlocks>* tiles, const BlockQ8_K* const* y,
                float (*acc)[H][16], float (*accMin)[H][16]) {
  constexpr int kGroupsPerSub = kCodeGroups / K::kSubBlocks;
  __m512i s1[H][N];
  for (int h = 0; h < H; ++h)
    for (int t = 0; t < N; ++t) s1[h][t] = _mm512_setzero_si512();
  // RepackedGemm: d_w * d_a of each token and band, for the fma after every pair of sub-blocks.
  alignas(64) float dd[kOrder == DotOrder::RepackedGemm ? N : 1][H][16];
  if constexpr (kOrder == DotOrder::RepackedGemm) {
    for (int t = 0; t < N; ++t) {
      const __m512 da = _mm512_set1_ps(y[t]->d);
      for (int h = 0; h < H; ++h) {
        _mm512_store_ps(dd[t][h], _mm512_mul_ps(_mm512_load_ps(tiles[h].d), da));
      }
    }
  }
  for (int s = 0; s < K::kSubBlocks; ++s) {
    __m512i sum[H][N];
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < N; ++t) sum[h][t] = _mm512_setzero_si512();
    for (int j = 0; j < kGroupsPerSub; ++j) {
      const int g = s * kGroupsPerSub + j;
      __m512i w[H];
      for (int h = 0; h < H; ++h) {
        w[h] = _mm512_load_si512(reinterpret_cast<const __m512i*>(tiles[h].codes[g]));
      }
      for (int t = 0; t < N; ++t) {
        const __m512i a = _mm512_set1_epi32(load32(y[t]->qs + 4 * g));
        for (int h = 0; h < H; ++h) sum[h][t] = _mm512_dpbusd_epi32(sum[h][t], w[h], a);
      }
    }
    for (int h = 0; h < H; ++h) {
      const __m512i scale = _mm512_load_si512(reinterpret_cast<const __m512i*>(tiles[h].scales[s]));
      for (int t = 0; t < N; ++t) {
        s1[h][t] = _mm512_add_epi32(s1[h][t], _mm512_mullo_epi32(sum[h][t], scale));
      }
    }
    if constexpr (kOrder == DotOrder::RepackedGemm) {
      // The last sub-block of one step of llama.cpp's gemm (Q4_K: 64 elements, Q2_K: 128).
      if ((s + 1) % K::kGemmSubBlocks == 0) {
        for (int t = 0; t < N; ++t) {
          for (int h = 0; h < H; ++h) {
            _mm512_store_ps(acc[t][h],
                            _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1[h][t]), _mm512_load_ps(dd[t][h]),
                                            _mm512_load_ps(acc[t][h])));
            s1[h][t] = _mm512_setzero_si512();
          }
        }
      }
    }
  }
  if constexpr (kOrder == DotOrder::RepackedGemm) {
    // The minimum terms of the steps, in step order: the step's minimums times their
    // activations' sums (Q4_K: one pair of sub-blocks, Q2_K: four) times dmin_w * d_a, fused
    // into accMin (they do not depend on the quants, so they can wait for the block's end).
    constexpr int kGemmSteps = K::kSubBlocks / K::kGemmSubBlocks;
    constexpr int kPairsPerStep = K::kSubBlocks / 2 / kGemmSteps;
    for (int t = 0; t < N; ++t) {
      const __m512i sums = subBlockSumPairs(*y[t]);
      const __m512 da = _mm512_set1_ps(y[t]->d);
      __m512i pair[K::kSubBlocks / 2];
      for (int p = 0; p < K::kSubBlocks / 2; ++p) pair[p] = pairActivations<K>(*y[t], sums, p);
      for (int h = 0; h < H; ++h) {
        const __m512 dm = _mm512_mul_ps(_mm512_load_ps(tiles[h].dmin), da);
        __m512 m = _mm512_load_ps(accMin[t][h]);
        for (int j = 0; j < kGemmSteps; ++j) {
          __m512i s2 = _mm512_setzero_si512();
          for (int p = kPairsPerStep * j; p < kPairsPerStep * (j + 1); ++p) {
            s2 = _mm512_dpwssd_epi32(
                s2, _mm512_load_si512(reinterpret_cast<const __m512i*>(tiles[h].pairs[p])),
                pair[p]);
          }
          m = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s2), dm, m);
        }
        _mm512_store_ps(accMin[t][h], m);
      }
    }
    return;
  }
  for (int t = 0; t < N; ++t) {
    // Once per token for all H bands.
    const __m512i sums =
        K::kHasMin || K::kSubBlocks == 8 ? subBlockSumPairs(*y[t]) : _mm512_setzero_si512();
    for (int h = 0; h < H; ++h) {
      bandEpilogue<K, kOrder>(tiles[h], *y[t], sums, s1[h][t], acc[t][h],
                              kOrder != DotOrder::Tiled ? accMin[t][h] : nullptr);
    }
  }
}

// bandTokens for n tokens, 1 <= n <= N.
template <class K, int H, int N, DotOrder kOrder>
void bandTokensFor(int n, const BandTile<K::kSubBlocks>* tiles, const BlockQ8_K* const* y,
                   float (*acc)[H][16], float (*accMin)[H][16]) {
  if (n == N) {
    bandTokens<K, H, N, kOrder>(tiles, y, acc, accMin);
  } else if constexpr (N > 1) {
    bandTokensFor<K, H, N - 1, kOrder>(n, tiles, y, acc, accMin);
  }
}

// H bands of 16 rows from row r0, for every token: band h's rows from rowsAt(g, r0 + 16h) (a
// row source as FileRows).
template <class K, int H, int N, DotOrder kOrder, class Rows>
void bands(const GemmArgs& g, int64_t r0, Rows (*rowsAt)(const GemmArgs&, int64_t)) {
  const int64_t blocks = g.cols / 256;
  Rows rows[H];
  for (int h = 0; h < H; ++h) rows[h] = rowsAt(g, r0 + kBandRows * h);
  alignas(64) float acc[kBandChunk][H][16];
  alignas(64) float accMin[kOrder != DotOrder::Tiled ? kBandChunk : 1][H][16];
  BandTile<K::kSubBlocks> tiles[H];
  for (int64_t t0 = 0; t0 < g.tokens; t0 += kBandChunk) {
    const int chunk = static_cast<int>(g.tokens - t0 < kBandChunk ? g.tokens - t0 : kBandChunk);
    std::memset(acc, 0, sizeof acc[0] * static_cast<size_t>(chunk));
    if constexpr (kOrder != DotOrder::Tiled)
      std::memset(accMin, 0, sizeof accMin[0] * static_cast<size_t>(chunk));
    for (int64_t b = 0; b < blocks; ++b) {
      for (int h = 0; h < H; ++h) unpackBand<K>(rows[h], b, blocks, tiles[h]);
      for (int t = 0; t < chunk; t += N) {
        const int n = chunk - t < N ? chunk - t : N;
        const BlockQ8_K* y[N];
        for (int i = 0; i < n; ++i) {
          y[i] = reinterpret_cast<const BlockQ8_K*>(g.act +
                                                    static_cast<size_t>(t0 + t + i) * g.actStride) +
                 b;
        }
        bandTokensFor<K, H, N, kOrder>(n, tiles, y, acc + t,
                                       kOrder != DotOrder::Tiled ? accMin + t : nullptr);
      }
    }
    for (int t = 0; t < chunk; ++t) {
      if constexpr (kOrder != DotOrder::Tiled) {
        for (int h = 0; h < H; ++h) {
          _mm512_storeu_ps(g.y + (t0 + t) * g.ldy + r0 + kBandRows * h,
                           _mm512_sub_ps(_mm512_load_ps(acc[t][h]), _mm512_load_ps(accMin[t][h])));
        }
      } else {
        std::memcpy(g.y + (t0 + t) * g.ldy + r0, acc[t], sizeof acc[t]);
      }
    }
  }
}

// The 16 rows from r0 of a matrix in file layout.
template <class Block>
FileRows<Block> fileRows(const GemmArgs& g, int64_t r0) {
  FileRows<Block> rows;
  for (int r = 0; r < kBandRows; ++r) {
    rows.rows[r] =
        reinterpret_cast<const Block*>(g.weights + static_cast<size_t>(r0 + r) * g.weightStride);
  }
  return rows;
}

// Rows [rowBegin, rowEnd) in bands of 16 for every token, in the tiled order or (Q4_K) a
// repacked one (two bands at a time, then one), from a row source (fileRows by default);
// returns the first row it did not compute (fewer than 16 remain).
template <class K, DotOrder kOrder, class Rows>
int64_t gemmKBandsOrder(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd,
                        Rows (*rowsAt)(const GemmArgs&, int64_t)) {
  int64_t r0 = rowBegin;
  for (; r0 + 2 * kBandRows <= rowEnd; r0 += 2 * kBandRows) {
    bands<K, 2, kBandTokens2, kOrder>(g, r0, rowsAt);
  }
  if (r0 + kBandRows <= rowEnd) {
    bands<K, 1, kBandTokens, kOrder>(g, r0, rowsAt);
    r0 += kBandRows;
  }
  return r0;
}

// gemmKBandsOrder in g's order (DotOrder::Tiled; Repacked or RepackedGemm for Q4_K and Q2_K).
template <class K, class Rows = FileRows<typename K::Block>>
int64_t gemmKBands(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd,
                   Rows (*rowsAt)(const GemmArgs&, int64_t) = fileRows<typename K::Block>) {
  if constexpr (std::is_same_v<typename K::Block, BlockQ4_K> ||
                std::is_same_v<typename K::Block, BlockQ2_K>) {
    if (g.order == DotOrder::Repacked) {
      return gemmKBandsOrder<K, DotOrder::Repacked>(g, rowBegin, rowEnd, rowsAt);
    }
    if (g.order == DotOrder::RepackedGemm) {
      return gemmKBandsOrder<K, DotOrder::RepackedGemm>(g, rowBegin, rowEnd, rowsAt);
    }
  }
  return gemmKBandsOrder<K, DotOrder::Tiled>(g, rowBegin, rowEnd, rowsAt);
}

}  // namespace
}  // namespace shoal::cpu
