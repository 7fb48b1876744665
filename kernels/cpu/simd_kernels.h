#pragma once
// Entry points of the SIMD kernel files to one another (each level's table is assembled in its
// *_ops.cpp from these). Only reachable through the kernel tables, which hand them out only on a
// CPU that has the instructions.

#include <cstdint>

#include "kernels/cpu/kernel_table.h"

namespace shoal::cpu::avx2 {
void gemmQ4_0(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmQ4_1(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmQ5_0(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmQ5_1(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmQ8_0(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmQ4_K(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmQ5_K(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmQ6_K(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmIQ4_NL(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmMXFP4(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmQ2_K(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmQ3_K(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmIQ4_XS(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
// KernelTable::dotsF16 (avx2_half_dots.cpp).
void dotsHalf(const HalfDots& d);
}  // namespace shoal::cpu::avx2

namespace shoal::cpu::neon {
// Sets the quantized matrix kernels of the plain NEON level (neon_quant_gemm.cpp).
void setQuantGemms(KernelTable& t);
}  // namespace shoal::cpu::neon

namespace shoal::cpu::neondot {
// Sets the quantized matrix kernels of the dot-product level (neon_dotprod_quant_gemm.cpp).
void setQuantGemms(KernelTable& t);
}  // namespace shoal::cpu::neondot

namespace shoal::cpu::avx512 {
void gemmQ4_0(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmQ4_1(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmQ5_0(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmQ5_1(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmQ8_0(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmQ4_K(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmQ5_K(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmQ6_K(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmQ2_K(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmQ3_K(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmIQ4_XS(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmIQ4_NL(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
void gemmMXFP4(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);
// KernelTable::dotsF16 (avx512_half_dots.cpp).
void dotsHalf(const HalfDots& d);
// KernelTable::actSideBytes and actSide: the grouped Q4_0/Q4_1/Q8_0 kernels' side rows
// (avx512_quant_groups.h).
size_t actSideBytes(ActKind kind, int64_t cols);
void actSide(ActKind kind, const void* actRow, int64_t cols, void* sideRow);
}  // namespace shoal::cpu::avx512
