#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/kernel_table.h"

namespace shoal::cpu {

void AttentionScratch::reserve(const AttentionShape& shape, int threads) {
  stride = shape.valueStride();
  headDim = shape.headDim;
  const size_t t = static_cast<size_t>(std::max(1, threads));
  query.assign(t * static_cast<size_t>(shape.headDim), 0);
  scores.assign(t * static_cast<size_t>(stride), 0.0f);
  probs.assign(t * static_cast<size_t>(stride), 0);
}

void attention(const AttentionShape& s, const float* q, int32_t count, int32_t firstPosition,
               const uint16_t* keys, const uint16_t* values, float* out, ThreadPool& pool,
               AttentionScratch& scratch, int32_t orderTokens) {
  const KernelTable& k = kernels();
  const int64_t hd = s.headDim, kvDim = s.kvDim(), qDim = static_cast<int64_t>(s.nHead) * hd;
  const int32_t group = s.nHead / s.nHeadKv;
  const int64_t vStride = s.valueStride();
  // ggml: one token -> ggml_vec_dot_f16; a batch -> tinyBLAS when its shape allows (kq: K rows
  // of headDim, a multiple of 16; kqv: headDim value rows, a multiple of 4).
  const int32_t batch = orderTokens > 0 ? orderTokens : count;
  const DotOrder kqOrder = batch >= 2 && hd % 16 == 0 ? DotOrder::Tiled : DotOrder::Vec;
  const DotOrder kqvOrder = batch >= 2 && hd % 4 == 0 ? DotOrder::Tiled : DotOrder::Vec;
  const int64_t pad = kqvOrder == DotOrder::Tiled ? 16 : 64;

  pool.parallelFor(static_cast<int64_t>(count) * s.nHead, [&](int64_t begin, int64_t end,
                                                              int thread) {
    uint16_t* q16 = scratch.query.data() + static_cast<size_t>(thread) * static_cast<size_t>(hd);
    float* scores = scratch.scores.data() + static_cast<size_t>(thread) * scratch.stride;
    uint16_t* probs = scratch.probs.data() + static_cast<size_t>(thread) * scratch.stride;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / s.nHead;
      const int32_t h = static_cast<int32_t>(item % s.nHead);
      const int64_t kvHead = h / group;
      const int64_t visible = firstPosition + t + 1;
      const int64_t padded = (visible + pad - 1) / pad * pad;
      // A sliding window hides positions before `first` (mask -inf: probability 0). The softmax
      // sums groups of 16 from position 0, so it starts at the group holding `first`: the fully
      // masked groups before it add exact zeros.
      const int64_t first = s.window > 0 ? std::max<int64_t>(0, visible - s.window) : 0;
      const int64_t from = first / 16 * 16;

      // kq: the query enters the f16 product rounded to f16 (ggml converts src1 to F16).
      k.floatToHalf(q + t * qDim + h * hd, q16, hd);
      float maxScore = -INFINITY;
      const float invCap = s.softcap > 0 ? 1.0f / s.softcap : 0.0f;
      std::fill(scores + from, scores + first, -INFINITY);
      k.dotsF16(keys + first * kvDim + kvHead * hd, kvDim, q16, hd, visible - first, kqOrder,
                scores + first);
      for (int64_t p = first; p < visible; ++p) {
        float dot = scores[p];
        if (s.softcap > 0) dot = std::tanh(dot * invCap) * s.softcap;
        scores[p] = dot * s.scale;  // ggml_soft_max_ext: kq * scale + mask (0 where visible)
        maxScore = std::max(maxScore, scores[p]);
      }
      if (s.sinks) maxScore = std::max(maxScore, s.sinks[h]);
      double sum = k.softmaxExp(scores + from, maxScore, scores + from, visible - from);
      if (s.sinks) sum += static_cast<double>(std::exp(s.sinks[h] - maxScore));
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t p = first; p < visible; ++p) scores[p] *= inv;
      // kqv: probabilities enter as f16; masked and padding positions are exact zeros.
      std::fill(probs, probs + first, uint16_t{0});
      k.floatToHalf(scores + first, probs + first, visible - first);
      std::fill(probs + visible, probs + padded, uint16_t{0});
      const uint16_t* vRows = values + kvHead * hd * vStride;
      k.dotsF16(vRows, vStride, probs, padded, hd, kqvOrder, out + t * qDim + h * hd);
    }
  });
}

}  // namespace shoal::cpu
