#pragma once
// The AVX-512 Q5_K and Q6_K row-group decode kernels built with GFNI (avx512_gfni_groups.cpp,
// compiled with -mgfni): the same kernels as avx512_kquant_groups.h's groupDotKN and groupDotQ6KN,
// the same numbers, with the bit placement in fewer instructions. Call only where useGfni()
// (cpu_features.h) holds; a CPU without GFNI faults on them.

#include <cstdint>

#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/row_groups.h"

namespace shoal::cpu::avx512 {

// out[t][r] = row r's vec-order dot of one group with token t (of n, 1 to 4: blocks y[t], the
// same activations in pair lanes at lanes[t]), over `blocks` super-blocks.
void groupDotQ5KGfni(const BlockQ5_Kx8* x, const BlockQ8_K* const* y,
                     const PairLaneBlock* const* lanes, int n, int64_t blocks,
                     float (*out)[kGroupRows]);
// The same for Q6_K (no pair lanes).
void groupDotQ6KGfni(const BlockQ6_Kx8* x, const BlockQ8_K* const* y, int n, int64_t blocks,
                     float (*out)[kGroupRows]);

}  // namespace shoal::cpu::avx512
