// AVX-512 kernel table (placeholder until the AVX-512 kernels land).

#include "kernels/cpu/kernel_table.h"

namespace shoal::cpu {

const KernelTable* avx512Kernels() { return nullptr; }

}  // namespace shoal::cpu
