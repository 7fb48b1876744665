// The GFNI builds of the Q5_K and Q6_K row-group decode kernels (avx512_gfni_groups.h). This file
// alone is compiled with -mgfni (as well as the AVX-512 flags), so no other kernel can pick up
// GFNI instructions from the compiler, and it is reached only after useGfni().
//
// Why GFNI: GF2P8AFFINEQB multiplies each byte by an 8x8 bit matrix, so one instruction moves any
// bits of every byte anywhere within it. Q5_K's fifth bit and Q6_K's two top bits then reach
// bit 4 of the quant byte in one op, and one vpternlogd masks the nibble and ORs them in. On one
// core of the Zen 4 VM, with a 256x2048 matrix in cache (cpu_kernels_bench --rows 256 --cols
// 2048), that took Q5_K from 21.0-22.3 to 25.0-29.1 GB/s and Q6_K from 27.0-31.0 to 31.4-38.1.

#include <immintrin.h>

#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/simd_kernels.h"
#include "kernels/cpu/x86_kquant_kernels.h"
// After x86_kquant_kernels.h, whose helpers they use.
#include "kernels/cpu/avx512_kquant_bands.h"
#include "kernels/cpu/avx512_kquant_groups.h"

namespace shoal::cpu::avx512 {

void groupDotQ5KGfni(const BlockQ5_Kx8* x, const BlockQ8_K* const* y,
                     const PairLaneBlock* const* lanes, int n, int64_t blocks,
                     float (*out)[kGroupRows]) {
  groupDotKN<BlockQ5_Kx8, true>(x, y, lanes, n, blocks, out);
}

void groupDotQ6KGfni(const BlockQ6_Kx8* x, const BlockQ8_K* const* y, int n, int64_t blocks,
                     float (*out)[kGroupRows]) {
  groupDotQ6KN<true>(x, y, n, blocks, out);
}

}  // namespace shoal::cpu::avx512
