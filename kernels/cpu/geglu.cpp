#include "kernels/cpu/geglu.h"

#include <array>
#include <cmath>

#include "engine/gguf/dequantize.h"

namespace shoal::cpu {

namespace {

// ggml_table_gelu_f16: gelu of every f16 value, computed as ggml-cpu's ggml_gelu_f32 compiles
// (-march=native contracts 1 + a*x*x into one fma) and rounded to f16. The gemma3 fixtures
// pass with the unfused form too: rounding to f16 absorbs the difference on their values.
const std::array<uint16_t, 65536>& geluTable() {
  static const std::array<uint16_t, 65536> table = [] {
    constexpr float kCoefA = 0.044715f;
    constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
    std::array<uint16_t, 65536> t{};
    for (uint32_t i = 0; i < 65536; ++i) {
      const float x = gguf::halfToFloat(static_cast<uint16_t>(i));
      const float inner = std::fma(kCoefA * x, x, 1.0f);
      t[i] = gguf::floatToHalf(0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * inner)));
    }
    return t;
  }();
  return table;
}

}  // namespace

void geglu(const float* gate, const float* up, float* y, int64_t n) {
  const auto& table = geluTable();
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    if (x <= -10.0f) {
      y[i] = 0.0f;
    } else if (x >= 10.0f) {
      y[i] = x * up[i];
    } else {
      y[i] = gguf::halfToFloat(table[gguf::floatToHalf(x)]) * up[i];
    }
  }
}

}  // namespace shoal::cpu
