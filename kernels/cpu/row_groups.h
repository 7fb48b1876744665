#pragma once
// Weight rows in groups of 8, interleaved super-block by super-block: the layout the CPU stage's
// weight copy gives a matrix where the active kernel level reads it (KernelTable::rowGroups).
//
// Why: a decode mat-vec in file layout reads one row after another, and per 256-element block of
// each row it pays for unpacking that row's scales, converting its d and dmin, its minimum terms
// and its float epilogue. Those per-block costs were half of the AVX-512 Q4_K kernel's
// instructions, and Q4_K decode was bound by them on one core (23.8 tok/s vs llama.cpp's 28.1 for
// a 1B model). With eight rows' blocks side by side, one pass unpacks eight rows' scales and
// minimums in a few 512-bit instructions, converts their 16 halves at once, shares the
// activation loads and runs the epilogue two rows per register, and the weights of a thread's
// rows are one front-to-back stream. ggml's CPU "extra buffer types" (ggml-cpu/repack.cpp,
// block_q4_Kx8) interleave for the same reason; this layout is Shoal's own (each row's fields
// kept whole, so that a row comes back with plain copies, except the Q4_K and Q5_K quants' pair
// lanes below, which a row gets back by one cheap swap), and the kernels that read it keep the
// file layout's rounding order, so results stay bit-identical.
//
// A grouped matrix keeps its size and the offset of every eighth row, so a view of rows that
// starts on a group (a fused matrix's row range, one expert of a stack) is a grouped matrix too.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "engine/gguf/tensor_type.h"
#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/kernel_table.h"

namespace shoal::cpu {

constexpr int kGroupRows = 8;

// Q4_K and Q5_K groups keep each row's quants in "pair lanes": the 32 bytes that hold a row's
// sub-blocks a = 2m and b = 2m + 1 (chunk m) are reordered so that byte 4i + u carries, in its
// low nibble, element 4i + u % 2 of sub-block (u < 2 ? a : b), and in its high nibble the element
// two further on. Why: the decode kernels multiply a nibble register by activations with
// vpmaddubsw and each int16 pair by its sub-block's scale with vpdpwssd (pmaddwd at AVX2). In the
// file layout a register's nibbles of one kind come from one sub-block, so each of a row's eight
// 32-element steps needs its own broadcast scale (a byte shuffle each); in pair lanes both
// nibble steps of chunk m meet the same alternating (scale a, scale b) pairs, one shuffle per
// chunk, and each int32 lane still sums elements 4i .. 4i+3 of each sub-block: the file
// layout's (ggml's) integer lanes, exactly. The activations are reordered to match once per call
// (pairLaneActivations in the kernels). The reordering swaps nibble bits 0 and 2 of each 32-bit
// word's nibble index, one delta swap that is its own inverse (pairLaneSwap). Both rows of a
// pair have their chunk m side by side, so one 512-bit load holds two rows' chunk.
//
// Super-block b of rows 8g .. 8g+7 of a Q4_K matrix: the eight rows' d, dmin and packed scales
// side by side (row r's at index r), then the quants of row pair p (rows 2p, 2p+1), chunk m, in
// pair lanes at qs[p][m][r % 2].
struct BlockQ4_Kx8 {
  uint16_t d[kGroupRows];
  uint16_t dmin[kGroupRows];
  uint8_t scales[kGroupRows][12];
  uint8_t qs[kGroupRows / 2][4][2][32];
};
static_assert(sizeof(BlockQ4_Kx8) == kGroupRows * sizeof(BlockQ4_K));

// Super-block b of rows 8g .. 8g+7 of a Q5_K matrix, laid out as BlockQ4_Kx8 with the rows'
// fifth bits after their scales, a pair's two rows side by side: the fifth bit of the low
// (high) nibble of byte k of chunk m is bit 2m (2m + 1) of qh[p][r % 2][k]. In the file layout
// bit s of qh[e] is element e of sub-block s; in pair lanes' terms that swaps the bit index's
// lowest bit with bit 1 of the byte index (pairLaneSwapBits, its own inverse too).
struct BlockQ5_Kx8 {
  uint16_t d[kGroupRows];
  uint16_t dmin[kGroupRows];
  uint8_t scales[kGroupRows][12];
  uint8_t qh[kGroupRows / 2][2][32];
  uint8_t qs[kGroupRows / 2][4][2][32];
};
static_assert(sizeof(BlockQ5_Kx8) == kGroupRows * sizeof(BlockQ5_K));

// One super-block of a token's Q8_K activations in pair lanes: for each chunk m, the 32 bytes that
// chunk m's low nibbles multiply, then the 32 its high nibbles do, each written twice (the x86
// kernels' pairLaneActivations writes them): a 512-bit kernel reads a step for both rows of a
// pair with one plain load (a broadcast load takes an ALU slot on Zen 4), a 256-bit one reads the
// first copy.
struct alignas(64) PairLaneBlock {
  int8_t qs[4][2][64];
};

// 32 quant bytes between the file layout and pair lanes (either way: the map is an involution).
// In the 32-bit word of elements 4i .. 4i+3, the file layout's nibble 4h + 2c + w (byte 2h + c,
// element 4i + 2h + c of sub-block a if w = 0, b if w = 1) is pair lanes' nibble 4w + 2c + h
// (byte 2w + c, nibble h): nibbles 1 and 3 trade places with nibbles 4 and 6.
static inline void pairLaneSwap(const uint8_t* in, uint8_t* out) {
  uint32_t x[8];  // (word by word: a loop compilers vectorize)
  std::memcpy(x, in, sizeof x);
  for (uint32_t& w : x) {
    const uint32_t t = ((w >> 12) ^ w) & 0x0000F0F0u;
    w ^= t ^ (t << 12);
  }
  std::memcpy(out, x, sizeof x);
}

// 32 fifth-bit bytes between the file layout and pair lanes (an involution): in a 32-bit word,
// bit 16h + 8c + 2m + w trades places with bit 16w + 8c + 2m + h.
static inline void pairLaneSwapBits(const uint8_t* in, uint8_t* out) {
  uint32_t x[8];
  std::memcpy(x, in, sizeof x);
  for (uint32_t& w : x) {
    const uint32_t t = ((w >> 15) ^ w) & 0x0000AAAAu;
    w ^= t ^ (t << 15);
  }
  std::memcpy(out, x, sizeof x);
}

// Super-block b of rows 8g .. 8g+7 of a Q6_K matrix: the eight rows' d, then their scales, high
// bits and low bits (BlockQ6_K's fields, small ones first).
struct BlockQ6_Kx8 {
  uint16_t d[kGroupRows];
  int8_t scales[kGroupRows][16];
  uint8_t qh[kGroupRows][64];
  uint8_t ql[kGroupRows][128];
};
static_assert(sizeof(BlockQ6_Kx8) == kGroupRows * sizeof(BlockQ6_K));

// Block b of rows 8g .. 8g+7 of a Q4_0 matrix: the eight rows' scales, then their quants (one
// 64-byte load holds four rows' quants).
struct BlockQ4_0x8 {
  uint16_t d[kGroupRows];
  uint8_t qs[kGroupRows][16];
};
static_assert(sizeof(BlockQ4_0x8) == kGroupRows * sizeof(BlockQ4_0));

// Block b of rows 8g .. 8g+7 of an MXFP4 matrix: the eight rows' exponents, then their quants
// (as BlockQ4_0x8).
struct BlockMXFP4x8 {
  uint8_t e[kGroupRows];
  uint8_t qs[kGroupRows][16];
};
static_assert(sizeof(BlockMXFP4x8) == kGroupRows * sizeof(BlockMXFP4));

// Block b of rows 8g .. 8g+7 of a Q4_1 matrix: scales, minimums, then quants.
struct BlockQ4_1x8 {
  uint16_t d[kGroupRows];
  uint16_t m[kGroupRows];
  uint8_t qs[kGroupRows][16];
};
static_assert(sizeof(BlockQ4_1x8) == kGroupRows * sizeof(BlockQ4_1));

// Block b of rows 8g .. 8g+7 of a Q8_0 matrix (one 64-byte load holds two rows' quants).
struct BlockQ8_0x8 {
  uint16_t d[kGroupRows];
  int8_t qs[kGroupRows][32];
};
static_assert(sizeof(BlockQ8_0x8) == kGroupRows * sizeof(BlockQ8_0));

// Whether the weight type has a row-group layout (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4;
// IQ4_NL, whose blocks have Q4_0's shape, in BlockQ4_0x8).
bool hasRowGroups(WeightKind kind);
// The same for a GGUF tensor type (false for a type without a CPU matrix kernel).
bool hasRowGroups(gguf::TensorType type);

// Rewrites a matrix of `rows` rows (a multiple of kGroupRows) of `cols` elements in place into
// row groups. Throws shoal::Error for a kind without the layout or a row count that does not
// divide into groups.
void groupRows(WeightKind kind, uint8_t* data, int64_t rows, int64_t cols);

// Row r of a grouped matrix (row 0 starting a group), in file layout, into out (a row's bytes).
void ungroupRow(WeightKind kind, const uint8_t* data, int64_t cols, int64_t r, uint8_t* out);
// Rows [rowBegin, rowEnd) of a grouped matrix, row r into out + (r - rowBegin) * outStride, read
// group block by group block (front to back: what a kernel's fallback copies while the hardware
// prefetchers follow).
void ungroupRows(WeightKind kind, const uint8_t* data, int64_t cols, int64_t rowBegin,
                 int64_t rowEnd, uint8_t* out, size_t outStride);

// Row r (0-7) of one grouped super-block, in file layout. Internal linkage on purpose: the
// AVX-512 kernels include this header, and an inline function with external linkage could be
// merged into one copy built with instructions other CPUs lack (see x86_kquant_kernels.h).
static inline void ungroupBlock(const BlockQ4_Kx8& x, int r, BlockQ4_K& out) {
  out.d = x.d[r];
  out.dmin = x.dmin[r];
  std::memcpy(out.scales, x.scales[r], 12);
  for (int m = 0; m < 4; ++m) pairLaneSwap(x.qs[r / 2][m][r % 2], out.qs + 32 * m);
}
static inline void ungroupBlock(const BlockQ5_Kx8& x, int r, BlockQ5_K& out) {
  out.d = x.d[r];
  out.dmin = x.dmin[r];
  std::memcpy(out.scales, x.scales[r], 12);
  pairLaneSwapBits(x.qh[r / 2][r % 2], out.qh);
  for (int m = 0; m < 4; ++m) pairLaneSwap(x.qs[r / 2][m][r % 2], out.qs + 32 * m);
}
static inline void ungroupBlock(const BlockQ4_0x8& x, int r, BlockQ4_0& out) {
  out.d = x.d[r];
  std::memcpy(out.qs, x.qs[r], 16);
}
static inline void ungroupBlock(const BlockMXFP4x8& x, int r, BlockMXFP4& out) {
  out.e = x.e[r];
  std::memcpy(out.qs, x.qs[r], 16);
}
static inline void ungroupBlock(const BlockQ4_1x8& x, int r, BlockQ4_1& out) {
  out.d = x.d[r];
  out.m = x.m[r];
  std::memcpy(out.qs, x.qs[r], 16);
}
static inline void ungroupBlock(const BlockQ8_0x8& x, int r, BlockQ8_0& out) {
  out.d = x.d[r];
  std::memcpy(out.qs, x.qs[r], 32);
}
static inline void ungroupBlock(const BlockQ6_Kx8& x, int r, BlockQ6_K& out) {
  std::memcpy(out.ql, x.ql[r], 128);
  std::memcpy(out.qh, x.qh[r], 64);
  std::memcpy(out.scales, x.scales[r], 16);
  out.d = x.d[r];
}

}  // namespace shoal::cpu
