// Reference quantizers. Each reproduces the arithmetic of ggml's `quantize_row_*_ref`
// (ggml/src/ggml-quants.c) operation for operation, including its rounding helpers, so a file
// Shoal writes holds the same bytes llama.cpp's reference path would write, and activations the
// CPU backend quantizes (Q8_0, Q8_1, Q8_K) round exactly as ggml's reference does. Block layouts
// are documented next to the dequantizers in dequantize.cpp.

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "engine/error.h"
#include "engine/gguf/dequantize.h"
#include "engine/gguf/quant_common.h"

namespace shoal::gguf {

namespace {

constexpr float kGroupMaxEps = 1e-15f;  // ggml GROUP_MAX_EPS

// Round to nearest, ties to even, for |v| < 2^22: adding 1.5 * 2^23 pushes the fraction out
// of the mantissa, so the FPU's rounding does the work (ggml nearest_int does the same).
int nearestInt(float v) {
  const float shifted = v + 12582912.f;
  const uint32_t bits = floatToBits(shifted);
  return static_cast<int>(bits & 0x007fffffu) - 0x00400000;
}

// ---- 32-element blocks --------------------------------------------------------------------

// Sign-carrying absolute maximum: the value with the largest magnitude (first one on ties).
float signedAbsMax(const float* x, int n) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void quantQ4_0(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, b += 18) {
    // The extreme value maps to -8 exactly, so its sign decides which end gets the extra step.
    const float d = signedAbsMax(x, 32) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    storeHalf(b, d);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
      b[2 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// ggml's best_index_int8: the level nearest to x (ties to the lower one).
int bestIq4NlIndex(float x) {
  const int8_t* val = kIq4NlValues;
  if (x <= val[0]) return 0;
  if (x >= val[15]) return 15;
  int ml = 0, mu = 15;
  while (mu - ml > 1) {
    const int mav = (ml + mu) / 2;
    if (x < val[mav]) {
      mu = mav;
    } else {
      ml = mav;
    }
  }
  return x - static_cast<float>(val[mu - 1]) < static_cast<float>(val[mu]) - x ? mu - 1 : mu;
}

// One 32-element block's scale as quantize_row_iq4_nl_impl finds it without importance weights
// (each value weighted by x^2): d0 = the extreme value over the first level (its sign flipped
// when searching), the levels nearest x / d0, d refit by weighted least squares; then, for
// ntry > 0, the inverse scales (itry + level0) / max for itry in -ntry..ntry, each refit and kept
// where it fits better. `levels` gets the first pass's levels (IQ4_NL keeps them). 0 for a block
// below GROUP_MAX_EPS (levels then untouched).
float iq4BlockScale(const float* x, int ntry, uint8_t* levels) {
  const float max = signedAbsMax(x, 32);
  if (std::fabs(max) < kGroupMaxEps) return 0.0f;
  const auto level0 = static_cast<float>(kIq4NlValues[0]);
  float d = ntry > 0 ? -max / level0 : max / level0;
  float id = 1 / d;
  float sumqx = 0, sumq2 = 0;
  for (int j = 0; j < 32; ++j) {
    const int l = bestIq4NlIndex(id * x[j]);
    levels[j] = static_cast<uint8_t>(l);
    const auto q = static_cast<float>(kIq4NlValues[l]);
    const float w = x[j] * x[j];
    sumqx += w * q * x[j];
    sumq2 += w * q * q;
  }
  d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
  float best = d * sumqx;
  for (int itry = -ntry; itry <= ntry; ++itry) {
    id = static_cast<float>(itry + kIq4NlValues[0]) / max;
    sumqx = sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const auto q = static_cast<float>(kIq4NlValues[bestIq4NlIndex(id * x[j])]);
      const float w = x[j] * x[j];
      sumqx += w * q * x[j];
      sumq2 += w * q * q;
    }
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

// quantize_row_iq4_nl_ref: quantize_row_iq4_nl_impl with one 32-element block and no scale
// search (ntry -1), so the first pass's levels stay. Checked against ggml's bytes
// (test_gguf_quantize), except that an all-zero block's quants are 0 here, where ggml leaves the
// previous block's levels (its scale is 0, so they decode to zero either way).
void quantIQ4_NL(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, b += 18) {
    uint8_t levels[32] = {};
    storeHalf(b, iq4BlockScale(x, -1, levels));
    for (int j = 0; j < 16; ++j) {
      b[2 + j] = static_cast<uint8_t>(levels[j] | (levels[j + 16] << 4));
    }
  }
}

// quantize_row_iq4_xs_ref: quantize_row_iq4_nl_impl with 256-element super-blocks of 32-element
// sub-blocks and ggml's scale search (ntry 7) for each sub-block's scale; the super-block's
// d = -(the sub-block scale of largest magnitude) / 32 (stored as f16, used unrounded as ggml
// does), each sub-block's as the nearest 6-bit multiple of d, then the levels nearest to
// x / (d * ls). Checked against ggml's bytes (test_gguf_quantize).
void quantIQ4_XS(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 256, b += 136) {
    std::memset(b, 0, 136);
    float scales[8];
    float maxScale = 0, amaxScale = 0;
    for (int s = 0; s < 8; ++s) {
      uint8_t unused[32];
      scales[s] = iq4BlockScale(x + 32 * s, 7, unused);
      if (std::fabs(scales[s]) > amaxScale) {
        amaxScale = std::fabs(scales[s]);
        maxScale = scales[s];
      }
    }
    const float d = -maxScale / 32;
    storeHalf(b, d);
    const float id = d != 0 ? 1 / d : 0.0f;
    uint16_t high = 0;
    for (int s = 0; s < 8; ++s) {
      const int l = std::clamp(nearestInt(id * scales[s]), -32, 31);
      const float dl = d * static_cast<float>(l);
      const float idl = dl != 0 ? 1 / dl : 0.0f;
      const int ls = l + 32;
      b[4 + s / 2] = static_cast<uint8_t>(b[4 + s / 2] | ((ls & 0xf) << (4 * (s % 2))));
      high = static_cast<uint16_t>(high | ((ls >> 4) << (2 * s)));
      uint8_t* qs = b + 8 + 16 * s;
      const float* xs = x + 32 * s;
      for (int j = 0; j < 16; ++j) {
        qs[j] = static_cast<uint8_t>(bestIq4NlIndex(idl * xs[j]) |
                                     (bestIq4NlIndex(idl * xs[j + 16]) << 4));
      }
    }
    storeU16(b + 2, high);
  }
}

// quantize_row_mxfp4_ref: the shared exponent floor(log2(amax)) - 2 (so the largest level, 6,
// covers amax), then for each value the level nearest to it (the first on ties). The exponent is
// clamped to E8M0's finite range, where ggml's cast would be undefined.
void quantMXFP4(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, b += 17) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float biased = amax > 0 ? std::floor(std::log2(amax)) - 2 + 127 : 0.0f;
    const auto e = static_cast<uint8_t>(std::clamp(biased, 0.0f, 254.0f));
    const float d = e8m0Half(e);
    auto nearest = [d](float v) {
      int best = 0;
      float bestErr = std::fabs(static_cast<float>(kMxfp4Values[0]) * d - v);
      for (int l = 1; l < 16; ++l) {
        const float err = std::fabs(static_cast<float>(kMxfp4Values[l]) * d - v);
        if (err < bestErr) {
          best = l;
          bestErr = err;
        }
      }
      return static_cast<uint8_t>(best);
    };
    b[0] = e;
    for (int j = 0; j < 16; ++j) {
      b[1 + j] = static_cast<uint8_t>(nearest(x[j]) | (nearest(x[j + 16]) << 4));
    }
  }
}

void minMax(const float* x, int n, float& min, float& max) {
  min = FLT_MAX;
  max = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
}

void quantQ4_1(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, b += 20) {
    float min, max;
    minMax(x, 32, min, max);
    const float d = (max - min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    storeHalf(b, d);
    storeHalf(b + 2, min);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
      const int q1 =
          std::min(15, static_cast<int>(static_cast<int8_t>((x[j + 16] - min) * id + 0.5f)));
      b[4 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quantQ5_0(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, b += 22) {
    const float d = signedAbsMax(x, 32) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    storeHalf(b, d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
      const int q1 = std::min(31, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 16.5f)));
      b[6 + j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
      qh |= static_cast<uint32_t>((q0 & 0x10) >> 4) << j;
      qh |= static_cast<uint32_t>((q1 & 0x10) >> 4) << (j + 16);
    }
    storeU32(b + 2, qh);
  }
}

void quantQ5_1(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, b += 24) {
    float min, max;
    minMax(x, 32, min, max);
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    storeHalf(b, d);
    storeHalf(b + 2, min);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
      const int q1 = static_cast<uint8_t>((x[j + 16] - min) * id + 0.5f);
      b[8 + j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
      qh |= static_cast<uint32_t>((q0 & 0x10) >> 4) << j;
      qh |= static_cast<uint32_t>((q1 & 0x10) >> 4) << (j + 16);
    }
    storeU32(b + 4, qh);
  }
}

float absMax(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax;
}

void quantQ8_0(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, b += 34) {
    const float d = absMax(x, 32) / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    storeHalf(b, d);
    for (int j = 0; j < 32; ++j) {
      b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
    }
  }
}

void quantQ8_1(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, b += 36) {
    const float d = absMax(x, 32) / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    storeHalf(b, d);
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      const auto q = static_cast<int8_t>(std::round(x[j] * id));
      b[4 + j] = static_cast<uint8_t>(q);
      sum += q;
    }
    storeHalf(b + 2, static_cast<float>(sum) * d);
  }
}

// ---- k-quant helpers (ggml make_qkx2_quants, make_qx_quants, make_q3_quants) ------------------

// Fits x ≈ scale * L + min (L in 0..nmax, min <= 0) minimising the weighted error; tries
// nstep+1 candidate scales around nmax / (max - min). Returns scale, sets theMin = -min.
float fitScaleMin(int n, int nmax, const float* x, const float* weights, uint8_t* L, float& theMin,
                  uint8_t* Laux, float rmin, float rdelta, int nstep, bool useMad) {
  float min = x[0];
  float max = x[0];
  float sumW = weights[0];
  float sumX = sumW * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sumW += w;
    sumX += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    theMin = -min;
    return 0.f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float bestError = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearestInt(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * static_cast<float>(L[i]) + min - x[i];
    diff = useMad ? std::fabs(diff) : diff * diff;
    bestError += weights[i] * diff;
  }
  if (nstep < 1) {
    theMin = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sumL = 0, sumL2 = 0, sumXL = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearestInt(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const auto fl = static_cast<float>(l);
      sumL += w * fl;
      sumL2 += w * fl * fl;
      sumXL += w * fl * x[i];
    }
    const float D = sumW * sumL2 - sumL * sumL;
    if (D > 0) {
      float thisScale = (sumW * sumXL - sumX * sumL) / D;
      float thisMin = (sumL2 * sumX - sumL * sumXL) / D;
      if (thisMin > 0) {
        thisMin = 0;
        thisScale = sumXL / sumL2;
      }
      float curError = 0;
      for (int i = 0; i < n; ++i) {
        float diff = thisScale * static_cast<float>(Laux[i]) + thisMin - x[i];
        diff = useMad ? std::fabs(diff) : diff * diff;
        curError += weights[i] * diff;
      }
      if (curError < bestError) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        bestError = curError;
        scale = thisScale;
        min = thisMin;
      }
    }
  }
  theMin = -min;
  return scale;
}

// Symmetric fit x ≈ scale * (L - nmax), L in 0..2*nmax-1, weights x^2 (ggml rmse_type 1),
// trying 18 scales around nmax / max. Returns the scale.
float fitScaleSymmetric(int n, int nmax, const float* x, int8_t* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearestInt(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    const auto fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearestInt(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      const auto fl = static_cast<float>(l);
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearestInt(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q3_K's symmetric fit with coordinate-descent refinement (ggml make_q3_quants, do_rmse).
float fitScaleQ3(int n, int nmax, const float* x, int8_t* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearestInt(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const auto li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (slx > 0) {
        float sl2 = suml2 - w * li * li;
        int newL = nearestInt(x[i] * sl2 / slx);
        newL = std::max(-nmax, std::min(nmax - 1, newL));
        if (newL != L[i]) {
          const auto fl = static_cast<float>(newL);
          slx += w * x[i] * fl;
          sl2 += w * fl * fl;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(newL);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (!changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// ---- 256-element super-blocks -------------------------------------------------------------

void quantQ2_K(const float* x, uint8_t* b, int64_t nb) {
  uint8_t L[256];
  uint8_t Laux[16];
  float weights[16];
  float mins[16];
  float scales[16];
  constexpr float kQ4Scale = 15.f;
  for (int64_t i = 0; i < nb; ++i, x += 256, b += 84) {
    uint8_t* bScales = b;
    uint8_t* qs = b + 16;
    float maxScale = 0;
    float maxMin = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] =
          fitScaleMin(16, 3, x + 16 * j, weights, L + 16 * j, mins[j], Laux, -0.5f, 0.1f, 15, true);
      maxScale = std::max(maxScale, scales[j]);
      maxMin = std::max(maxMin, mins[j]);
    }
    if (maxScale > 0) {
      const float iscale = kQ4Scale / maxScale;
      for (int j = 0; j < 16; ++j)
        bScales[j] = static_cast<uint8_t>(nearestInt(iscale * scales[j]));
      storeHalf(b + 80, maxScale / kQ4Scale);
    } else {
      std::memset(bScales, 0, 16);
      storeHalf(b + 80, 0.f);
    }
    if (maxMin > 0) {
      const float iscale = kQ4Scale / maxMin;
      for (int j = 0; j < 16; ++j) {
        bScales[j] = static_cast<uint8_t>(bScales[j] | (nearestInt(iscale * mins[j]) << 4));
      }
      storeHalf(b + 82, maxMin / kQ4Scale);
    } else {
      storeHalf(b + 82, 0.f);
    }
    const float dAll = loadHalf(b + 80);
    const float dminAll = loadHalf(b + 82);
    for (int j = 0; j < 16; ++j) {
      const float d = dAll * static_cast<float>(bScales[j] & 0x0f);
      if (d == 0.0f) continue;
      const float dm = dminAll * static_cast<float>(bScales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearestInt((x[16 * j + ii] + dm) / d);
        L[16 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(3, l)));
      }
    }
    for (int j = 0; j < 256; j += 128) {
      for (int l = 0; l < 32; ++l) {
        qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) |
                                             (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
      }
    }
  }
}

void quantQ3_K(const float* x, uint8_t* b, int64_t nb) {
  int8_t L[256];
  float scales[16];
  for (int64_t i = 0; i < nb; ++i, x += 256, b += 110) {
    uint8_t* hmask = b;
    uint8_t* qs = b + 32;
    uint8_t* packed = b + 96;
    float maxScale = 0;
    float amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = fitScaleQ3(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        maxScale = scales[j];
      }
    }
    std::memset(packed, 0, 12);
    if (maxScale != 0.0f) {
      const float iscale = -32.f / maxScale;
      for (int j = 0; j < 16; ++j) {
        int l = static_cast<int8_t>(nearestInt(iscale * scales[j]));
        l = std::max(-32, std::min(31, l)) + 32;
        if (j < 8) {
          packed[j] = static_cast<uint8_t>(l & 0x0f);
        } else {
          packed[j - 8] = static_cast<uint8_t>(packed[j - 8] | ((l & 0x0f) << 4));
        }
        l >>= 4;
        packed[j % 4 + 8] = static_cast<uint8_t>(packed[j % 4 + 8] | (l << (2 * (j / 4))));
      }
      storeHalf(b + 108, 1 / iscale);
    } else {
      storeHalf(b + 108, 0.f);
    }
    const float dAll = loadHalf(b + 108);
    for (int j = 0; j < 16; ++j) {
      int sc = j < 8 ? packed[j] & 0x0f : packed[j - 8] >> 4;
      sc = (sc | (((packed[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
      const float d = dAll * static_cast<float>(sc);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearestInt(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-4, std::min(3, l)) + 4);
      }
    }
    // High bit of element j goes to bit j/32 of hmask[j%32]; the stored q keeps the low 2 bits.
    std::memset(hmask, 0, 32);
    for (int j = 0; j < 256; ++j) {
      if (L[j] > 3) {
        hmask[j % 32] = static_cast<uint8_t>(hmask[j % 32] | (1u << (j / 32)));
        L[j] = static_cast<int8_t>(L[j] - 4);
      }
    }
    for (int j = 0; j < 256; j += 128) {
      for (int l = 0; l < 32; ++l) {
        qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) |
                                             (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
      }
    }
  }
}

// Shared by Q4_K and Q5_K: fit 8 sub-blocks of 32 with 6-bit scales and mins, pack the 12 scale
// bytes, write d/dmin, and leave the final quant levels (0..nmax) in L.
void fitKQuantScales(const float* x, uint8_t* head, int nmax, float rmin, int nstep, uint8_t* L) {
  uint8_t Laux[32];
  float weights[32];
  float mins[8];
  float scales[8];
  float maxScale = 0;
  float maxMin = 0;
  for (int j = 0; j < 8; ++j) {
    float sumX2 = 0;
    for (int l = 0; l < 32; ++l) sumX2 += x[32 * j + l] * x[32 * j + l];
    const float avX = std::sqrt(sumX2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = avX + std::fabs(x[32 * j + l]);
    scales[j] = fitScaleMin(32, nmax, x + 32 * j, weights, L + 32 * j, mins[j], Laux, rmin, 0.1f,
                            nstep, false);
    maxScale = std::max(maxScale, scales[j]);
    maxMin = std::max(maxMin, mins[j]);
  }
  uint8_t* packed = head + 4;
  const float invScale = maxScale > 0 ? 63.f / maxScale : 0.f;
  const float invMin = maxMin > 0 ? 63.f / maxMin : 0.f;
  for (int j = 0; j < 8; ++j) {
    uint8_t ls = static_cast<uint8_t>(nearestInt(invScale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(nearestInt(invMin * mins[j]));
    ls = std::min<uint8_t>(63, ls);
    lm = std::min<uint8_t>(63, lm);
    if (j < 4) {
      packed[j] = ls;
      packed[j + 4] = lm;
    } else {
      packed[j + 4] = static_cast<uint8_t>((ls & 0x0f) | ((lm & 0x0f) << 4));
      packed[j - 4] = static_cast<uint8_t>(packed[j - 4] | ((ls >> 4) << 6));
      packed[j] = static_cast<uint8_t>(packed[j] | ((lm >> 4) << 6));
    }
  }
  storeHalf(head, maxScale / 63.f);
  storeHalf(head + 2, maxMin / 63.f);
  const float dAll = loadHalf(head);
  const float dminAll = loadHalf(head + 2);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    decodeScaleMinK4(j, packed, sc, m);
    const float d = dAll * sc;
    if (d == 0.0f) continue;
    const float dm = dminAll * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearestInt((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

void quantQ4_K(const float* x, uint8_t* b, int64_t nb) {
  uint8_t L[256];
  for (int64_t i = 0; i < nb; ++i, x += 256, b += 144) {
    fitKQuantScales(x, b, 15, -1.f, 20, L);
    uint8_t* q = b + 16;
    for (int j = 0; j < 256; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

void quantQ5_K(const float* x, uint8_t* b, int64_t nb) {
  uint8_t L[256];
  for (int64_t i = 0; i < nb; ++i, x += 256, b += 176) {
    fitKQuantScales(x, b, 31, -0.5f, 15, L);
    uint8_t* qh = b + 16;
    uint8_t* ql = b + 48;
    std::memset(qh, 0, 32);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < 256; n += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        int l2 = L[n + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

void quantQ6_K(const float* x, uint8_t* b, int64_t nb) {
  int8_t L[256];
  float scales[16];
  for (int64_t i = 0; i < nb; ++i, x += 256, b += 210) {
    float maxScale = 0;
    float maxAbsScale = 0;
    for (int ib = 0; ib < 16; ++ib) {
      scales[ib] = fitScaleSymmetric(16, 32, x + 16 * ib, L + 16 * ib);
      if (std::fabs(scales[ib]) > maxAbsScale) {
        maxAbsScale = std::fabs(scales[ib]);
        maxScale = scales[ib];
      }
    }
    if (maxAbsScale < kGroupMaxEps) {
      std::memset(b, 0, 210);
      continue;
    }
    auto* bScales = reinterpret_cast<int8_t*>(b + 192);
    const float iscale = -128.f / maxScale;
    storeHalf(b + 208, 1 / iscale);
    for (int ib = 0; ib < 16; ++ib) {
      bScales[ib] = static_cast<int8_t>(std::min(127, nearestInt(iscale * scales[ib])));
    }
    const float dAll = loadHalf(b + 208);
    for (int j = 0; j < 16; ++j) {
      const float d = dAll * static_cast<float>(bScales[j]);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearestInt(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
      }
    }
    uint8_t* ql = b;
    uint8_t* qh = b + 128;
    for (int j = 0; j < 256; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l] & 0x0f;
        const int q2 = L[j + l + 32] & 0x0f;
        const int q3 = L[j + l + 64] & 0x0f;
        const int q4 = L[j + l + 96] & 0x0f;
        ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                     ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

void quantQ8_K(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 256, b += 292) {
    float max = 0;
    float amax = 0;
    for (int j = 0; j < 256; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(b, 0, 292);  // ggml leaves bsums untouched here; zero is their true value
      continue;
    }
    // -127 rather than -128 (ggml: keeps every quant in -127..127 for the IQ dot products).
    const float iscale = -127.f / max;
    for (int j = 0; j < 256; ++j) {
      b[4 + j] =
          static_cast<uint8_t>(static_cast<int8_t>(std::min(127, nearestInt(iscale * x[j]))));
    }
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += static_cast<int8_t>(b[4 + j * 16 + ii]);
      const auto s = static_cast<int16_t>(sum);
      std::memcpy(b + 260 + 2 * j, &s, sizeof s);
    }
    storeF32(b, 1 / iscale);
  }
}

}  // namespace

void quantizeRow(TensorType type, const float* src, void* dst, int64_t n) {
  const TypeTraits traits = typeTraits(type);
  if (n < 0 || n % traits.blockSize != 0) {
    throw Error("quantizeRow: " + std::to_string(n) + " elements is not a multiple of the " +
                std::string(traits.name) + " block size " + std::to_string(traits.blockSize));
  }
  auto* out = static_cast<uint8_t*>(dst);
  const int64_t nb = n / traits.blockSize;
  switch (type) {
    case TensorType::F32:
      std::memcpy(out, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case TensorType::F16:
      for (int64_t i = 0; i < n; ++i) storeU16(out + 2 * i, floatToHalf(src[i]));
      return;
    case TensorType::BF16:
      for (int64_t i = 0; i < n; ++i) storeU16(out + 2 * i, floatToBf16(src[i]));
      return;
    case TensorType::Q4_0:
      return quantQ4_0(src, out, nb);
    case TensorType::Q4_1:
      return quantQ4_1(src, out, nb);
    case TensorType::Q5_0:
      return quantQ5_0(src, out, nb);
    case TensorType::Q5_1:
      return quantQ5_1(src, out, nb);
    case TensorType::Q8_0:
      return quantQ8_0(src, out, nb);
    case TensorType::Q8_1:
      return quantQ8_1(src, out, nb);
    case TensorType::Q2_K:
      return quantQ2_K(src, out, nb);
    case TensorType::Q3_K:
      return quantQ3_K(src, out, nb);
    case TensorType::Q4_K:
      return quantQ4_K(src, out, nb);
    case TensorType::Q5_K:
      return quantQ5_K(src, out, nb);
    case TensorType::Q6_K:
      return quantQ6_K(src, out, nb);
    case TensorType::Q8_K:
      return quantQ8_K(src, out, nb);
    case TensorType::IQ4_NL:
      return quantIQ4_NL(src, out, nb);
    case TensorType::MXFP4:
      return quantMXFP4(src, out, nb);
    case TensorType::IQ4_XS:
      return quantIQ4_XS(src, out, nb);
    default:
      throw Error("quantizeRow: type " + std::string(traits.name) + " is not supported");
  }
}

}  // namespace shoal::gguf
