// The quantized matrix kernels of Isa::Neon (plain ARMv8-A NEON): neon_quant_gemm_impl.h with
// the integer lanes formed by widening multiplies and pairwise adds.

#include "kernels/cpu/neon_quant_gemm_impl.h"
#include "kernels/cpu/simd_kernels.h"

namespace shoal::cpu::neon {

void setQuantGemms(KernelTable& t) { fillQuantGemms(t); }

}  // namespace shoal::cpu::neon
