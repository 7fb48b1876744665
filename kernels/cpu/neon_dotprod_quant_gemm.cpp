// The quantized matrix kernels of Isa::NeonDot: neon_quant_gemm_impl.h built with the ARMv8.2
// dot-product extension (SDOT forms the integer lanes). Reached only through the NeonDot table,
// which exists only on a CPU that reports the extension.

#if !defined(__ARM_FEATURE_DOTPROD)
#error "build this file with the dot-product extension (-march=armv8.2-a+dotprod)"
#endif

#include "kernels/cpu/neon_quant_gemm_impl.h"
#include "kernels/cpu/simd_kernels.h"

namespace shoal::cpu::neondot {

void setQuantGemms(KernelTable& t) { fillQuantGemms(t); }

}  // namespace shoal::cpu::neondot
