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

namespace {

// ggml_rope_yarn_corr_dim: the dimension whose wavelength spans nCtxOrig / beta rotations.
float yarnCorrDim(int32_t nDims, int32_t nCtxOrig, float beta, float base) {
  return static_cast<float>(nDims) *
         std::log(static_cast<float>(nCtxOrig) / (beta * 2 * static_cast<float>(M_PI))) /
         (2 * std::log(base));
}

}  // namespace

void ropeAngles(int32_t position, const model::RopeParams& rope, const float* freqFactors,
                float* cosOut, float* sinOut) {
  const float thetaScale = std::pow(rope.freqBase, -2.0f / static_cast<float>(rope.nRot));
  float theta = static_cast<float>(position);
  if (rope.extFactor == 0.0f) {
    for (int32_t i = 0; i < rope.nRot / 2; ++i) {
      const float ff = freqFactors ? freqFactors[i] : 1.0f;
      const float angle = rope.freqScale * (theta / ff);
      cosOut[i] = std::cos(angle) * rope.attnFactor;
      sinOut[i] = std::sin(angle) * rope.attnFactor;
      theta *= thetaScale;
    }
    return;
  }
  // YaRN, as ggml-cpu's rope_yarn and ggml_rope_yarn_corr_dims compute it (with GCC's
  // contraction of a * b + c * d into fma(a, b, c * d) under -march=native).
  const float low = std::max(
      0.0f, std::floor(yarnCorrDim(rope.nRot, rope.nCtxOrig, rope.betaFast, rope.freqBase)));
  const float high =
      std::min(static_cast<float>(rope.nRot - 1),
               std::ceil(yarnCorrDim(rope.nRot, rope.nCtxOrig, rope.betaSlow, rope.freqBase)));
  const float mscale = rope.attnFactor * std::fma(0.1f, std::log(1.0f / rope.freqScale), 1.0f);
  for (int32_t i = 0; i < rope.nRot / 2; ++i) {
    const float ff = freqFactors ? freqFactors[i] : 1.0f;
    const float extrap = theta / ff;
    const float interp = rope.freqScale * extrap;
    const float y = (static_cast<float>(i) - low) / std::max(0.001f, high - low);
    const float rampMix = (1 - std::min(1.0f, std::max(0.0f, y))) * rope.extFactor;
    const float angle = std::fma(interp, 1 - rampMix, extrap * rampMix);
    cosOut[i] = std::cos(angle) * mscale;
    sinOut[i] = std::sin(angle) * mscale;
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
