// Builds without x86 SIMD kernel files: the SIMD tables do not exist.

#include "kernels/cpu/kernel_table.h"

namespace shoal::cpu {

const KernelTable* avx2Kernels() { return nullptr; }
const KernelTable* avx512Kernels() { return nullptr; }

}  // namespace shoal::cpu
