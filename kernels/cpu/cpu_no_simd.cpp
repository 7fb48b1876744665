// The SIMD tables a build does not contain: the x86 levels outside x86-64, the NEON levels
// outside aarch64 (kernelsFor then reports the level as absent).

#include "kernels/cpu/kernel_table.h"

namespace shoal::cpu {

#if !defined(__x86_64__)
const KernelTable* avx2Kernels() { return nullptr; }
const KernelTable* avx512Kernels() { return nullptr; }
#endif

#if !defined(__aarch64__)
const KernelTable* neonKernels() { return nullptr; }
const KernelTable* neonDotKernels() { return nullptr; }
#endif

}  // namespace shoal::cpu
