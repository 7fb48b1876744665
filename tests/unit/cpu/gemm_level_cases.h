#pragma once
// The cases that compare a SIMD level's matrix kernels and activation converters with the scalar
// reference, bit for bit. Qt-free, so that the same cases run in test_cpu_matrix_kernels (QtTest)
// and in tests/cross/cpu_levels_check (an aarch64 build run under qemu, where there is no Qt).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cpu_test_util.h"
#include "engine/gguf/dequantize.h"
#include "engine/gguf/tensor_type.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/reference_kernels.h"
#include "kernels/cpu/row_groups.h"

namespace shoal::cpu::test {

// A weight matrix and a batch of activations in the formats the kernels take.
struct Problem {
  gguf::TensorType type;
  int64_t rows, cols, tokens;
  std::vector<float> weightsF32, xF32;
  std::vector<uint8_t> weights, act;
  size_t weightRow = 0, actRow = 0;

  Problem(gguf::TensorType t, int64_t r, int64_t c, int64_t n, uint32_t seed, bool outliers = true)
      : type(t), rows(r), cols(c), tokens(n) {
    weightsF32 = randomValues(static_cast<size_t>(r * c), seed, 0.05f);
    xF32 = randomValues(static_cast<size_t>(n * c), seed + 1, 1.0f, outliers);
    weightRow = gguf::rowBytes(t, c);
    weights.assign(weightRow * static_cast<size_t>(r), 0);
    for (int64_t i = 0; i < r; ++i) {
      gguf::quantizeRow(t, &weightsF32[static_cast<size_t>(i * c)], &weights[weightRow * i], c);
    }
    const ActKind a = activationKind(weightKind(t));
    actRow = gguf::rowBytes(activationTensorType(a), c);
    act.assign(actRow * static_cast<size_t>(n), 0);
    for (int64_t i = 0; i < n; ++i) {
      referenceKernels().convert[static_cast<int>(a)](&xF32[static_cast<size_t>(i * c)],
                                                      &act[actRow * i], c);
    }
  }

  // y of rows [rowBegin, rowEnd) for every token; other entries stay NaN. rowGroups: the
  // weights were put into row groups (row_groups.h). sideRows: give the kernel the level's side
  // rows of the activations (KernelTable::actSide) and the repacked order's RepackedQ4_0Act, as
  // matmul() does.
  std::vector<float> run(const KernelTable& k, DotOrder order, int64_t rowBegin, int64_t rowEnd,
                         bool rowGroups = false, bool sideRows = false) const {
    std::vector<float> y(static_cast<size_t>(rows * tokens), NAN);
    GemmArgs g;
    g.weights = weights.data();
    g.weightStride = weightRow;
    g.act = act.data();
    g.actStride = actRow;
    g.tokens = tokens;
    g.cols = cols;
    g.y = y.data();
    g.ldy = rows;
    g.order = order;
    g.rowGroups = rowGroups;
    const ActKind a = activationKind(weightKind(type));
    const size_t sideBytes = sideRows && k.actSideBytes ? k.actSideBytes(a, cols) : 0;
    std::vector<uint8_t> side(sideBytes * static_cast<size_t>(tokens) + 64);
    if (sideBytes > 0) {
      // Whole 64-byte registers are read from the side rows.
      const auto base = reinterpret_cast<uintptr_t>(side.data());
      auto* rows0 = reinterpret_cast<uint8_t*>((base + 63) / 64 * 64);
      for (int64_t t = 0; t < tokens; ++t) {
        k.actSide(a, &act[actRow * t], cols, rows0 + sideBytes * t);
      }
      g.actSide = rows0;
      g.actSideStride = sideBytes;
    }
    // The repacked order's per-block starting sums, as matmul() gives them.
    std::vector<RepackedQ4_0Act> blocks;
    if (sideRows && order == DotOrder::Repacked) {
      blocks.resize(static_cast<size_t>(cols / 32 * tokens));
      for (int64_t t = 0; t < tokens; ++t) {
        repackedQ4_0Act(&act[actRow * t], cols, blocks.data() + t * (cols / 32));
      }
      g.actBlocks = blocks.data();
      g.actBlocksStride = cols / 32;
    }
    k.gemm[static_cast<int>(weightKind(type))](g, rowBegin, rowEnd);
    return y;
  }
};

// Whether a type has DotOrder::Tiled at this row length.
inline bool tiledAllowed(gguf::TensorType t, int64_t cols) {
  using gguf::TensorType;
  if (t == TensorType::F32 || t == TensorType::F16) return cols % 16 == 0;
  if (t == TensorType::BF16) return cols % 32 == 0;
  return t == TensorType::Q4_K || t == TensorType::Q5_K || t == TensorType::Q6_K ||
         t == TensorType::Q2_K || t == TensorType::Q3_K || t == TensorType::IQ4_XS ||
         t == TensorType::IQ4_NL;
}

// The dot orders a type has at this row length (Vec always).
inline std::vector<DotOrder> ordersOf(gguf::TensorType t, int64_t cols) {
  std::vector<DotOrder> orders = {DotOrder::Vec};
  if (tiledAllowed(t, cols)) orders.push_back(DotOrder::Tiled);
  using gguf::TensorType;
  if (t == TensorType::Q4_0 || t == TensorType::Q4_K || t == TensorType::IQ4_NL ||
      t == TensorType::MXFP4 || t == TensorType::Q2_K) {
    orders.push_back(DotOrder::Repacked);
  }
  if (t == TensorType::Q4_K || t == TensorType::Q2_K) orders.push_back(DotOrder::RepackedGemm);
  return orders;
}

inline const char* orderName(DotOrder order) {
  switch (order) {
    case DotOrder::Vec:
      return "vec";
    case DotOrder::Tiled:
      return "tiled";
    case DotOrder::Repacked:
      return "repacked";
    case DotOrder::RepackedGemm:
      return "repacked-gemm";
  }
  return "?";
}

// Every weight type with its row lengths (block counts that exercise the kernels' tails) and
// the accuracy its reference kernel must reach against f32 activations.
struct GemmCase {
  gguf::TensorType type;
  std::vector<int> cols;
  double nmse;  // 1e-6 where activations enter exactly, 5e-4 where they are quantized
};
inline std::vector<GemmCase> gemmCases() {
  using gguf::TensorType;
  return {
      {TensorType::Q4_0, {32, 96, 576}, 5e-4},
      {TensorType::Q4_1, {32, 96, 576}, 5e-4},
      {TensorType::Q5_0, {32, 96, 576}, 5e-4},
      {TensorType::Q5_1, {32, 96, 576}, 5e-4},
      {TensorType::Q8_0, {32, 96, 576}, 5e-4},
      // 32 and 96: one and three blocks, the vec order's odd tail.
      {TensorType::IQ4_NL, {32, 96, 576}, 5e-4},
      {TensorType::MXFP4, {32, 96, 576}, 5e-4},
      {TensorType::Q4_K, {256, 512}, 5e-4},
      {TensorType::Q5_K, {256, 512}, 5e-4},
      {TensorType::Q6_K, {256, 512}, 5e-4},
      {TensorType::Q2_K, {256, 512}, 5e-4},
      {TensorType::Q3_K, {256, 512}, 5e-4},
      {TensorType::IQ4_XS, {256, 512}, 5e-4},
      {TensorType::F16, {16, 40, 64, 200, 576}, 1e-6},
      {TensorType::BF16, {16, 40, 64, 200, 576}, 5e-4},
      {TensorType::F32, {16, 40, 64, 200, 576}, 1e-6},
  };
}

// Level `isa` against the reference on one type and row length: row counts around the tiles
// (4, 8 and 16 rows; pairs of rows), token counts around the token tiles (4 and 8), both
// orders, whole and partial row ranges. Returns the first difference, or "" when none.
inline std::string gemmMismatch(gguf::TensorType t, int64_t cols, Isa isa) {
  const KernelTable& k = *kernelsFor(isa);
  uint32_t seed = 100;
  for (int64_t rows : {1, 3, 8, 13, 37}) {
    for (int64_t tokens : {1, 2, 3, 5, 7, 9, 17}) {
      const Problem p(t, rows, cols, tokens, seed++);
      for (DotOrder order : ordersOf(t, cols)) {
        for (auto [b, e] : {std::pair<int64_t, int64_t>{0, rows}, {rows / 2, rows}}) {
          if (b == e) continue;
          const auto ref = p.run(referenceKernels(), order, b, e);
          const auto got = p.run(k, order, b, e);
          const int64_t diff = firstBitDifference(got.data(), ref.data(), ref.size());
          if (diff < 0) continue;
          char value[64];
          std::snprintf(value, sizeof value, "%.9g, reference %.9g",
                        static_cast<double>(got[static_cast<size_t>(diff)]),
                        static_cast<double>(ref[static_cast<size_t>(diff)]));
          return std::string(isaName(isa)) + " " + gguf::typeName(t) + "/" + std::to_string(cols) +
                 ": rows " + std::to_string(rows) + " tokens " + std::to_string(tokens) +
                 " range [" + std::to_string(b) + "," + std::to_string(e) + ") order " +
                 orderName(order) + ": y[" + std::to_string(diff) + "] = " + value;
        }
      }
    }
  }
  return "";
}

// The types level `isa` reads in row groups (row_groups.h; KernelTable::rowGroups), each against
// the same level's file layout bit for bit: whole and partial row ranges (ranges that cut groups
// run the fallback), one and several tokens, both orders. Returns the first difference, or ""
// when none (or when the level groups no type). test_cpu_row_groups checks more shapes on the
// host; this is the cross build's check (cpu_levels_check.cpp, under qemu-user).
inline std::string rowGroupMismatch(Isa isa) {
  const KernelTable& k = *kernelsFor(isa);
  using gguf::TensorType;
  for (TensorType t : {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q8_0, TensorType::Q4_K,
                       TensorType::Q5_K, TensorType::Q6_K, TensorType::IQ4_NL, TensorType::MXFP4}) {
    if (!k.rowGroups[static_cast<int>(weightKind(t))]) continue;
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{8, 512}, {40, 256}, {56, 2816}}) {
      for (int64_t tokens : {1, 2, 9}) {
        const Problem p(t, rows, cols, tokens, static_cast<uint32_t>(100 + rows + tokens));
        Problem grouped = p;
        groupRows(weightKind(t), grouped.weights.data(), rows, cols);
        for (DotOrder order : {DotOrder::Vec, DotOrder::Tiled, DotOrder::Repacked}) {
          if (order == DotOrder::Tiled && tokens < 2) continue;
          if (order == DotOrder::Repacked && t != TensorType::Q4_0 && t != TensorType::IQ4_NL &&
              t != TensorType::MXFP4) {
            continue;
          }
          for (auto [b, e] : {std::pair<int64_t, int64_t>{0, rows}, {8, rows}, {3, rows - 5}}) {
            const auto want = p.run(k, order, b, e);
            const auto got = grouped.run(k, order, b, e, true);
            if (firstBitDifference(got.data(), want.data(), want.size()) < 0) continue;
            return std::string(isaName(isa)) + " " + gguf::typeName(t) + " in row groups, " +
                   std::to_string(rows) + "x" + std::to_string(cols) + " tokens " +
                   std::to_string(tokens) + " range [" + std::to_string(b) + "," +
                   std::to_string(e) + ") order " + orderName(order) +
                   ": differs from the file layout";
          }
        }
      }
    }
  }
  return "";
}

// Values the converters must round as the reference does, in a row of 256 or more.
inline void plantConverterCases(std::vector<float>& x) {
  if (x.size() < 256) return;
  x[5] = 0.5f;  // exact ties after scaling appear in real data too
  // Q8_K's signed maximum: the first of equal magnitudes decides the sign of the scale.
  x[9] = -100.0f;
  x[200] = 100.0f;
  if (x.size() >= 512) std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // an all-zero block
}

// Q8_K's block of magnitudes below 127 / FLT_MAX (elements 512..767): its inverse scale -127/max
// overflows to infinity, and the products become infinities and NaNs that ggml's rounding trick
// (nearest_int) turns into particular bytes, which every level must reproduce.
inline void plantTinyBlock(std::vector<float>& x) {
  if (x.size() < 768) return;
  for (size_t i = 512; i < 768; ++i) x[i] *= 1e-38f;
  x[520] = 0.0f;
}

// Level `isa`'s activation converters against the reference, byte for byte; "" when equal.
inline std::string converterMismatch(Isa isa) {
  const KernelTable& k = *kernelsFor(isa);
  for (int a = 0; a < static_cast<int>(ActKind::Count); ++a) {
    const gguf::TensorType type = activationTensorType(static_cast<ActKind>(a));
    for (int64_t n : {256, 512, 2048}) {
      auto x = randomValues(static_cast<size_t>(n), static_cast<uint32_t>(n + a), 3.0f);
      plantConverterCases(x);
      if (static_cast<ActKind>(a) == ActKind::Q8_K) plantTinyBlock(x);
      std::vector<uint8_t> ref(gguf::rowBytes(type, n), 0xAA), got(ref.size(), 0x55);
      referenceKernels().convert[a](x.data(), ref.data(), n);
      k.convert[a](x.data(), got.data(), n);
      if (ref != got) {
        return std::string(isaName(isa)) + " " + gguf::typeName(type) + " n=" + std::to_string(n);
      }
    }
  }
  return "";
}

}  // namespace shoal::cpu::test
