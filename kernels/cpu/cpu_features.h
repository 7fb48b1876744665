#pragma once
// Which instruction-set level the CPU kernels run at, chosen once at run time so one binary runs
// on any x86-64 or any 64-bit ARM (and, through the scalar path, anywhere else).
//
// Every level computes the same numbers: the SIMD kernels evaluate each sum in the order the
// scalar reference defines (ggml's x86 order, see kernel_table.h, on ARM too), so switching
// levels changes speed only. SHOAL_CPU_ISA=scalar|avx2|avx512|neon|neondot caps the level (tests
// and benchmarks use it).

#include <string_view>

namespace shoal::cpu {

enum class Isa {
  Scalar,   // portable C++; the reference
  Avx2,     // AVX2 + FMA + F16C (Haswell and later, Zen)
  Avx512,   // AVX-512 F/BW/VL/DQ + VNNI (Ice Lake, Sapphire Rapids, Zen 4)
  Neon,     // aarch64 Advanced SIMD (every ARMv8-A CPU: Raspberry Pi 3/4, Cortex-A53/A72)
  NeonDot,  // NEON + the ARMv8.2 dot product (Cortex-A76+, Raspberry Pi 5, Jetson Orin, Graviton)
};

std::string_view isaName(Isa isa);

// The best level this CPU supports (ignores SHOAL_CPU_ISA).
Isa detectIsa();

// The level in use: detectIsa() capped by SHOAL_CPU_ISA when set.
Isa activeIsa();

// Whether the AVX-512 level may use GFNI (GF2P8AFFINEQB: Ice Lake, Zen 4 and later; not
// Skylake-X or Cascade Lake), which its Q5_K and Q6_K row-group kernels use to place bits in
// fewer instructions (same numbers). SHOAL_CPU_GFNI=0 turns it off, so tests can run both paths.
bool useGfni();

// Whether this build contains the kernels of a level (x86-64 builds contain scalar and the x86
// levels, aarch64 builds scalar and the NEON levels).
bool isaCompiled(Isa isa);

}  // namespace shoal::cpu
