#pragma once
// Shared helpers of the CPU kernel tests: deterministic inputs, the kernel levels this machine
// runs, error measures.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernel_table.h"

namespace shoal::cpu::test {

// Normal values with occasional outliers (x8, unless outliers is false) and a few exact zeros,
// as activations have.
inline std::vector<float> randomValues(size_t n, uint32_t seed, float scale = 1.0f,
                                       bool outliers = true) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = normal(rng);
    if (outliers && i % 53 == 7) v[i] *= 8.0f;
    if (i % 97 == 11) v[i] = 0.0f;
  }
  return v;
}

// The SIMD levels this build and CPU can run (each is compared with Isa::Scalar).
inline std::vector<Isa> simdLevels() {
  std::vector<Isa> levels;
  for (Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::NeonDot}) {
    if (kernelsFor(isa)) levels.push_back(isa);
  }
  return levels;
}

// sum (got - ref)^2 / sum ref^2.
template <typename A, typename B>
double normalizedMse(const A& got, const B& ref) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(ref[i]);
    err += d * d;
    norm += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  return norm > 0 ? err / norm : err;
}

// Index of the first element whose bits differ, or -1.
inline int64_t firstBitDifference(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace shoal::cpu::test
