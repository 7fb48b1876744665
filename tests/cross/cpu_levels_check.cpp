// shoal-cpu-levels-check: every SIMD level this CPU runs against the scalar reference, bit for
// bit: the matrix kernels of every weight type (tests/unit/cpu/gemm_level_cases.h, the cases of
// test_cpu_matrix_kernels), the types each level reads in row groups against its file layout,
// and the activation converters. Qt-free: it is built for aarch64 and
// run under qemu-user by test_cpu_aarch64_qemu, where no Qt exists; QEMU_CPU picks which NEON
// levels the emulated CPU has.
//
// Prints "levels: <name>..." (the levels compared), one line per mismatch, and "all levels match
// the reference" at the end. Exit status: 0 all match, 1 a mismatch, 2 no SIMD level to compare.

#include <cstdio>
#include <string>

#include "gemm_level_cases.h"

using namespace shoal::cpu;

int main() {
  const std::vector<Isa> levels = test::simdLevels();
  std::printf("levels:");
  for (Isa isa : levels) std::printf(" %s", std::string(isaName(isa)).c_str());
  std::printf("\n");
  if (levels.empty()) {
    std::printf("no SIMD level on this CPU\n");
    return 2;
  }
  int failures = 0, cases = 0;
  for (Isa isa : levels) {
    for (const test::GemmCase& c : test::gemmCases()) {
      for (int cols : c.cols) {
        ++cases;
        const std::string diff = test::gemmMismatch(c.type, cols, isa);
        if (!diff.empty()) {
          std::printf("MISMATCH %s\n", diff.c_str());
          ++failures;
        }
      }
    }
    ++cases;
    const std::string groups = test::rowGroupMismatch(isa);
    if (!groups.empty()) {
      std::printf("MISMATCH %s\n", groups.c_str());
      ++failures;
    }
    ++cases;
    const std::string diff = test::converterMismatch(isa);
    if (!diff.empty()) {
      std::printf("MISMATCH converter %s\n", diff.c_str());
      ++failures;
    }
  }
  if (failures > 0) {
    std::printf("%d of %d cases differ from the reference\n", failures, cases);
    return 1;
  }
  std::printf("all levels match the reference (%d cases)\n", cases);
  return 0;
}
