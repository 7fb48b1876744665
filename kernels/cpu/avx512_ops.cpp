// The AVX-512 kernel table: the AVX-512 kernels where they pay, the AVX2 ones elsewhere.

#include "kernels/cpu/simd_kernels.h"

namespace shoal::cpu {
namespace avx512 {
namespace {

KernelTable makeTable() {
  const KernelTable* base = avx2Kernels();
  KernelTable t = *base;
  t.isa = Isa::Avx512;
  auto set = [&t](WeightKind k, GemmFn fn) { t.gemm[static_cast<int>(k)] = fn; };
  set(WeightKind::Q4_0, gemmQ4_0);
  set(WeightKind::Q4_1, gemmQ4_1);
  set(WeightKind::Q5_0, gemmQ5_0);
  set(WeightKind::Q5_1, gemmQ5_1);
  set(WeightKind::Q8_0, gemmQ8_0);
  set(WeightKind::Q4_K, gemmQ4_K);
  set(WeightKind::Q5_K, gemmQ5_K);
  set(WeightKind::Q6_K, gemmQ6_K);
  set(WeightKind::Q2_K, gemmQ2_K);  // prefill; decode as at the AVX2 level
  set(WeightKind::Q3_K, gemmQ3_K);
  set(WeightKind::IQ4_XS, gemmIQ4_XS);
  set(WeightKind::IQ4_NL, gemmIQ4_NL);  // the repacked order; the others as at the AVX2 level
  set(WeightKind::MXFP4, gemmMXFP4);    // likewise
  t.rowGroups[static_cast<int>(WeightKind::Q4_0)] = true;  // avx512_quant_groups.h
  t.rowGroups[static_cast<int>(WeightKind::Q4_1)] = true;
  t.rowGroups[static_cast<int>(WeightKind::Q8_0)] = true;
  t.rowGroups[static_cast<int>(WeightKind::IQ4_NL)] = true;  // Q4_0's groups and repacked kernel
  t.rowGroups[static_cast<int>(WeightKind::MXFP4)] = true;   // Q4_0's repacked kernel
  t.rowGroups[static_cast<int>(WeightKind::Q4_K)] = true;    // avx512_kquant_groups.h
  t.rowGroups[static_cast<int>(WeightKind::Q5_K)] = true;
  t.rowGroups[static_cast<int>(WeightKind::Q6_K)] = true;
  t.dotsF16 = dotsHalf;
  t.actSideBytes = actSideBytes;
  t.actSide = actSide;
  return t;
}

}  // namespace
}  // namespace avx512

const KernelTable* avx512Kernels() {
  static const KernelTable table = avx512::makeTable();
  return &table;
}

}  // namespace shoal::cpu
