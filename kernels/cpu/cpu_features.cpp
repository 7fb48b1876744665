#include "kernels/cpu/cpu_features.h"

#include <cstdlib>
#include <string>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace shoal::cpu {

std::string_view isaName(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return "scalar";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
    case Isa::Neon:
      return "neon";
    case Isa::NeonDot:
      return "neondot";
  }
  return "scalar";
}

bool isaCompiled(Isa isa) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  return isa == Isa::Scalar || isa == Isa::Avx2 || isa == Isa::Avx512;
#elif defined(__aarch64__) && defined(__linux__)
  return isa == Isa::Scalar || isa == Isa::Neon || isa == Isa::NeonDot;
#else
  return isa == Isa::Scalar;
#endif
}

Isa detectIsa() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  if (!avx2) return Isa::Scalar;
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vnni");
  return avx512 ? Isa::Avx512 : Isa::Avx2;
#elif defined(__aarch64__) && defined(__linux__)
  // Advanced SIMD is mandatory in the aarch64 Linux ABI; the dot product is reported by the
  // kernel (HWCAP_ASIMDDP, "asimddp" in /proc/cpuinfo).
  return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0 ? Isa::NeonDot : Isa::Neon;
#else
  return Isa::Scalar;
#endif
}

Isa activeIsa() {
  static const Isa active = [] {
    Isa isa = detectIsa();
    if (const char* cap = std::getenv("SHOAL_CPU_ISA")) {
      const std::string want(cap);
      if (want == "scalar") isa = Isa::Scalar;
      if (want == "avx2" && isa == Isa::Avx512) isa = Isa::Avx2;
      if (want == "neon" && isa == Isa::NeonDot) isa = Isa::Neon;
    }
    return isa;
  }();
  return active;
}

bool useGfni() {
  static const bool use = [] {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    const char* off = std::getenv("SHOAL_CPU_GFNI");
    return __builtin_cpu_supports("gfni") && !(off && std::string(off) == "0");
#else
    return false;
#endif
  }();
  return use;
}

}  // namespace shoal::cpu
