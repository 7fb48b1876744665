#include "kernels/cpu/swiglu_oai.h"

#include <algorithm>
#include <cmath>

namespace shoal::cpu {

void swigluOai(const float* gate, const float* up, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::min(gate[i], kSwigluOaiLimit);
    const float u = std::clamp(up[i], -kSwigluOaiLimit, kSwigluOaiLimit);
    const float glu = x / (1.0f + std::exp(kSwigluOaiAlpha * (-x)));
    y[i] = glu * (u + 1.0f);
  }
}

}  // namespace shoal::cpu
