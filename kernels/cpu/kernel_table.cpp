#include "kernels/cpu/kernel_table.h"

#include <string>

#include "engine/error.h"
#include "engine/gguf/dequantize.h"
#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/reference_kernels.h"

namespace shoal::cpu {
namespace {

using gguf::TensorType;

template <WeightKind K>
void referenceGemm(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  for (int64_t t = 0; t < g.tokens; ++t) {
    const uint8_t* a = g.act + static_cast<size_t>(t) * g.actStride;
    for (int64_t r = rowBegin; r < rowEnd; ++r) {
      g.y[t * g.ldy + r] =
          ref::dot(K, g.weights + static_cast<size_t>(r) * g.weightStride, a, g.cols, g.order);
    }
  }
}

KernelTable makeReferenceTable() {
  KernelTable t;
  t.isa = Isa::Scalar;
  auto set = [&t](WeightKind k, GemmFn fn) { t.gemm[static_cast<int>(k)] = fn; };
  set(WeightKind::F32, referenceGemm<WeightKind::F32>);
  set(WeightKind::F16, referenceGemm<WeightKind::F16>);
  set(WeightKind::BF16, referenceGemm<WeightKind::BF16>);
  set(WeightKind::Q4_0, referenceGemm<WeightKind::Q4_0>);
  set(WeightKind::Q4_1, referenceGemm<WeightKind::Q4_1>);
  set(WeightKind::Q5_0, referenceGemm<WeightKind::Q5_0>);
  set(WeightKind::Q5_1, referenceGemm<WeightKind::Q5_1>);
  set(WeightKind::Q8_0, referenceGemm<WeightKind::Q8_0>);
  set(WeightKind::Q4_K, referenceGemm<WeightKind::Q4_K>);
  set(WeightKind::Q5_K, referenceGemm<WeightKind::Q5_K>);
  set(WeightKind::Q6_K, referenceGemm<WeightKind::Q6_K>);
  set(WeightKind::IQ4_NL, referenceGemm<WeightKind::IQ4_NL>);
  set(WeightKind::MXFP4, referenceGemm<WeightKind::MXFP4>);
  set(WeightKind::Q2_K, referenceGemm<WeightKind::Q2_K>);
  set(WeightKind::Q3_K, referenceGemm<WeightKind::Q3_K>);
  set(WeightKind::IQ4_XS, referenceGemm<WeightKind::IQ4_XS>);
  auto conv = [&t](ActKind k, ConvertFn fn) { t.convert[static_cast<int>(k)] = fn; };
  conv(ActKind::F32, ref::convertF32);
  conv(ActKind::F16, ref::convertF16);
  conv(ActKind::BF16, ref::convertBF16);
  conv(ActKind::Q8_0, ref::quantizeQ8_0);
  conv(ActKind::Q8_1, ref::quantizeQ8_1);
  conv(ActKind::Q8_K, ref::quantizeQ8_K);
  t.halfToFloat = ref::halfToFloat;
  t.floatToHalf = ref::floatToHalf;
  t.dotF16 = ref::dotHalf;
  t.dotsF16 = dotsOneByOne<ref::dotHalf>;
  t.softmaxExp = ref::softmaxExp;
  t.swiglu = ref::swiglu;
  return t;
}

}  // namespace

void repackedQ4_0Act(const void* q8Row, int64_t cols, RepackedQ4_0Act* out) {
  const auto* y = static_cast<const BlockQ8_0*>(q8Row);
  for (int64_t b = 0; b < cols / kQK; ++b) {
    int32_t sum = 0;
    for (int8_t v : y[b].qs) sum += v;
    out[b].start = -8 * sum;
    out[b].d = gguf::halfToFloat(y[b].d);
  }
}

WeightKind weightKind(gguf::TensorType type) {
  switch (type) {
    case TensorType::F32:
      return WeightKind::F32;
    case TensorType::F16:
      return WeightKind::F16;
    case TensorType::BF16:
      return WeightKind::BF16;
    case TensorType::Q4_0:
      return WeightKind::Q4_0;
    case TensorType::Q4_1:
      return WeightKind::Q4_1;
    case TensorType::Q5_0:
      return WeightKind::Q5_0;
    case TensorType::Q5_1:
      return WeightKind::Q5_1;
    case TensorType::Q8_0:
      return WeightKind::Q8_0;
    case TensorType::Q4_K:
      return WeightKind::Q4_K;
    case TensorType::Q5_K:
      return WeightKind::Q5_K;
    case TensorType::Q6_K:
      return WeightKind::Q6_K;
    case TensorType::IQ4_NL:
      return WeightKind::IQ4_NL;
    case TensorType::MXFP4:
      return WeightKind::MXFP4;
    case TensorType::Q2_K:
      return WeightKind::Q2_K;
    case TensorType::Q3_K:
      return WeightKind::Q3_K;
    case TensorType::IQ4_XS:
      return WeightKind::IQ4_XS;
    default:
      break;
  }
  throw Error("CPU backend: no matrix kernel for weight type " + gguf::typeName(type));
}

ActKind activationKind(WeightKind kind) {
  switch (kind) {
    case WeightKind::F32:
      return ActKind::F32;
    case WeightKind::F16:
      return ActKind::F16;
    case WeightKind::BF16:
      return ActKind::BF16;
    case WeightKind::Q4_0:
    case WeightKind::Q5_0:
    case WeightKind::Q8_0:
    case WeightKind::IQ4_NL:
    case WeightKind::MXFP4:
      return ActKind::Q8_0;
    case WeightKind::Q4_1:
    case WeightKind::Q5_1:
      return ActKind::Q8_1;
    case WeightKind::Q4_K:
    case WeightKind::Q5_K:
    case WeightKind::Q6_K:
    case WeightKind::Q2_K:
    case WeightKind::Q3_K:
    case WeightKind::IQ4_XS:
      return ActKind::Q8_K;
    case WeightKind::Count:
      break;
  }
  throw Error("CPU backend: invalid weight kind " + std::to_string(static_cast<int>(kind)));
}

gguf::TensorType activationTensorType(ActKind kind) {
  switch (kind) {
    case ActKind::F32:
      return TensorType::F32;
    case ActKind::F16:
      return TensorType::F16;
    case ActKind::BF16:
      return TensorType::BF16;
    case ActKind::Q8_0:
      return TensorType::Q8_0;
    case ActKind::Q8_1:
      return TensorType::Q8_1;
    case ActKind::Q8_K:
      return TensorType::Q8_K;
    case ActKind::Count:
      break;
  }
  throw Error("CPU backend: invalid activation kind " + std::to_string(static_cast<int>(kind)));
}

const KernelTable& referenceKernels() {
  static const KernelTable table = makeReferenceTable();
  return table;
}

const KernelTable* kernelsFor(Isa isa) {
  if (!isaCompiled(isa)) return nullptr;
  const Isa best = detectIsa();
  switch (isa) {
    case Isa::Scalar:
      return &referenceKernels();
    case Isa::Avx2:
      return best == Isa::Scalar ? nullptr : avx2Kernels();
    case Isa::Avx512:
      return best == Isa::Avx512 ? avx512Kernels() : nullptr;
    case Isa::Neon:
      return best == Isa::Neon || best == Isa::NeonDot ? neonKernels() : nullptr;
    case Isa::NeonDot:
      return best == Isa::NeonDot ? neonDotKernels() : nullptr;
  }
  return nullptr;
}

const KernelTable& kernels() {
  static const KernelTable* active = [] {
    for (Isa isa = activeIsa();; isa = static_cast<Isa>(static_cast<int>(isa) - 1)) {
      if (const KernelTable* t = kernelsFor(isa)) return t;
      if (isa == Isa::Scalar) return &referenceKernels();
    }
  }();
  return *active;
}

}  // namespace shoal::cpu
