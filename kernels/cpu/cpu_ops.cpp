#include "kernels/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>

namespace shoal::cpu {

void rmsNorm(const float* x, const float* weight, float* y, int64_t n, float eps) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * weight[i];
}

void ropeAngles(int32_t position, const model::RopeParams& rope, const float* freqFactors,
                float* cosOut, float* sinOut) {
  const float thetaScale = std::pow(rope.freqBase, -2.0f / static_cast<float>(rope.nRot));
  float theta = static_cast<float>(position);
  for (int32_t i = 0; i < rope.nRot / 2; ++i) {
    const float ff = freqFactors ? freqFactors[i] : 1.0f;
    const float angle = rope.freqScale * (theta / ff);
    cosOut[i] = std::cos(angle);
    sinOut[i] = std::sin(angle);
    theta *= thetaScale;
  }
}

void applyRope(float* x, int32_t heads, int32_t headDim, const model::RopeParams& rope,
               const float* cosv, const float* sinv) {
  const model::RopeStyle style = rope.style;
  const int32_t half = rope.nRot / 2;
  for (int32_t h = 0; h < heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * headDim;
    for (int32_t i = 0; i < half; ++i) {
      // Normal style rotates adjacent dims; NeoX rotates dim i with dim i + nRot/2.
      const int32_t a = style == model::RopeStyle::Normal ? 2 * i : i;
      const int32_t b = style == model::RopeStyle::Normal ? 2 * i + 1 : i + half;
      const float x0 = v[a], x1 = v[b];
      // ggml's rotate_pairs as GCC compiles it (-march=native contracts each expression into
      // one fma; checked against llama.cpp's output bit for bit).
      v[a] = std::fma(x0, cosv[i], -(x1 * sinv[i]));
      v[b] = std::fma(x0, sinv[i], x1 * cosv[i]);
    }
  }
}

}  // namespace shoal::cpu
