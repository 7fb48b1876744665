#include "kernels/cpu/cpu_features.h"

#include <cstdlib>
#include <string>

namespace shoal::cpu {

std::string_view isaName(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return "scalar";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
  }
  return "scalar";
}

bool isaCompiled(Isa isa) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  (void)isa;
  return true;
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
    }
    return isa;
  }();
  return active;
}

}  // namespace shoal::cpu
