#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/kernel_table.h"

namespace shoal::cpu {
namespace {

// A work item's scratch stays within this many bytes per thread (scores and probabilities of
// every position for each of its queries), and an item holds at most kMostQueries queries.
constexpr int64_t kItemBytes = int64_t{4} << 20;
constexpr int64_t kMostQueries = 32;

int32_t queriesPerItem(const AttentionShape& s) {
  const int64_t perQuery = s.valueStride() * (4 + 2 + 4) + int64_t{s.headDim} * (2 + 4 + 4);
  return static_cast<int32_t>(std::clamp<int64_t>(kItemBytes / perQuery, 1, kMostQueries));
}

template <typename T>
T* slice(std::vector<T>& v, int thread, int64_t perThread) {
  return v.data() + static_cast<size_t>(thread) * static_cast<size_t>(perThread);
}

}  // namespace

void AttentionScratch::reserve(const AttentionShape& shape, int threads) {
  stride = shape.valueStride();
  headDim = shape.headDim;
  queries = queriesPerItem(shape);
  const size_t n = static_cast<size_t>(std::max(1, threads)) * static_cast<size_t>(queries);
  query16.assign(n * static_cast<size_t>(headDim), 0);
  query32.assign(n * static_cast<size_t>(headDim), 0.0f);
  scores.assign(n * static_cast<size_t>(stride), 0.0f);
  probs16.assign(n * static_cast<size_t>(stride), 0);
  probs32.assign(n * static_cast<size_t>(stride), 0.0f);
  outs.assign(n * static_cast<size_t>(headDim), 0.0f);
}

// Work is cut into items of `heads` heads sharing one KV head times a run of `tokens` tokens, so
// that each key and value row is read once for all of an item's queries. The heads of a GQA
// group go together unless that leaves too few items to keep every thread busy.
void attention(const AttentionShape& s, const float* q, int32_t count, int32_t firstPosition,
               const uint16_t* keys, const uint16_t* values, float* out, ThreadPool& pool,
               AttentionScratch& scratch, int32_t orderTokens) {
  const KernelTable& k = kernels();
  const int64_t hd = s.headDim, qDim = static_cast<int64_t>(s.nHead) * hd;
  const int32_t group = s.nHead / s.nHeadKv;
  const int64_t vStride = s.valueStride(), stride = scratch.stride;
  // ggml: one token -> ggml_vec_dot_f16; a batch -> tinyBLAS when its shape allows (kq: K rows
  // of headDim, a multiple of 16; kqv: headDim value rows, a multiple of 4).
  const int32_t batch = orderTokens > 0 ? orderTokens : count;
  const DotOrder kqOrder = batch >= 2 && hd % 16 == 0 ? DotOrder::Tiled : DotOrder::Vec;
  const DotOrder kqvOrder = batch >= 2 && hd % 4 == 0 ? DotOrder::Tiled : DotOrder::Vec;
  const int64_t pad = kqvOrder == DotOrder::Tiled ? 16 : 64;

  const int threads = pool.size();
  int32_t heads = group, tokens = 1;
  int64_t items = 0;
  for (;; --heads) {
    if (heads > 1 && (group % heads != 0 || heads > scratch.queries)) continue;
    tokens = std::max(1, std::min(count, scratch.queries / heads));
    items = (count + tokens - 1) / tokens * (s.nHead / heads);
    if (heads == 1 || threads == 1 || items % threads == 0 || items >= 4 * threads) break;
  }
  const int64_t headBlocks = s.nHead / heads;

  pool.parallelFor(items, [&](int64_t begin, int64_t end, int thread) {
    const int64_t perQueries = scratch.queries;
    uint16_t* q16 = slice(scratch.query16, thread, perQueries * hd);
    float* q32 = slice(scratch.query32, thread, perQueries * hd);
    float* scores = slice(scratch.scores, thread, perQueries * stride);
    uint16_t* probs16 = slice(scratch.probs16, thread, perQueries * stride);
    float* probs32 = slice(scratch.probs32, thread, perQueries * stride);
    float* outs = slice(scratch.outs, thread, perQueries * hd);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t0 = item / headBlocks * tokens;
      const int32_t h0 = static_cast<int32_t>(item % headBlocks) * heads;
      const int64_t kvHead = h0 / group;
      const int64_t tn = std::min<int64_t>(tokens, count - t0);
      const int32_t nq = static_cast<int32_t>(tn * heads);  // query j: token t0 + j / heads
      // Positions token t sees: [first, visible); a sliding window hides those before `first`.
      auto visibleOf = [&](int64_t t) { return firstPosition + t + 1; };
      auto firstOf = [&](int64_t t) {
        return s.window > 0 ? std::max<int64_t>(0, visibleOf(t) - s.window) : int64_t{0};
      };

      // kq: the query enters the f16 product rounded to f16 (ggml converts src1 to F16).
      for (int32_t j = 0; j < nq; ++j) {
        const int64_t t = t0 + j / heads, h = h0 + j % heads;
        k.floatToHalf(q + t * qDim + h * hd, q16 + j * hd, hd);
        k.halfToFloat(q16 + j * hd, q32 + j * hd, hd);
      }
      // Every position any of the item's tokens sees; each token then reads its own range.
      // Scores and probabilities are indexed from `base`, the 64-position step that holds the
      // first of them: the steps before it would only add exact zeros to the dot products
      // (probability 0 times a finite value), so leaving them out changes no bit, and a
      // windowed layer reads its window rather than the whole context.
      const int64_t lo = firstOf(t0), hi = visibleOf(t0 + tn - 1);
      const int64_t base = lo / 64 * 64;
      HalfDots kq;
      kq.rowStride = s.keyPositionStride();
      kq.y16 = q16;
      kq.y32 = q32;
      kq.yStride = hd;
      kq.queries = nq;
      kq.n = hd;
      kq.order = kqOrder;
      kq.outStride = stride;
      // Each K·q is a dot of its own, so a ring's wrap may cut the run of keys in two.
      for (int64_t p = lo; p < hi;) {
        const int64_t slot = s.keySlot(p);
        const int64_t run = std::min(hi - p, s.keySlots() - slot);
        kq.rows = keys + kvHead * s.keyHeadStride() + slot * s.keyPositionStride();
        kq.count = run;
        kq.out = scores + (p - base);
        k.dotsF16(kq);
        p += run;
      }

      for (int32_t j = 0; j < nq; ++j) {
        const int64_t t = t0 + j / heads;
        const int32_t h = h0 + j % heads;
        const int64_t visible = visibleOf(t), first = firstOf(t);
        const int64_t padded = (visible + pad - 1) / pad * pad;
        // The softmax sums groups of 16 from position 0, so it starts at the group holding
        // `first`: the fully masked groups before it add exact zeros.
        const int64_t from = first / 16 * 16;
        // Indices from here on count from `base`: [f, v) are the visible positions.
        const int64_t f = first - base, v = visible - base, fr = from - base, pd = padded - base;
        float* sc = scores + j * stride;
        float maxScore = -INFINITY;
        const float invCap = s.softcap > 0 ? 1.0f / s.softcap : 0.0f;
        std::fill(sc + fr, sc + f, -INFINITY);
        for (int64_t p = f; p < v; ++p) {
          float dot = sc[p];
          if (s.softcap > 0) dot = std::tanh(dot * invCap) * s.softcap;
          sc[p] = dot * s.scale;  // ggml_soft_max_ext: kq * scale + mask (0 where visible)
          maxScore = std::max(maxScore, sc[p]);
        }
        if (s.sinks) maxScore = std::max(maxScore, s.sinks[h]);
        double sum = k.softmaxExp(sc + fr, maxScore, sc + fr, v - fr);
        if (s.sinks) sum += static_cast<double>(std::exp(s.sinks[h] - maxScore));
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t p = f; p < v; ++p) sc[p] *= inv;
        // kqv: probabilities enter as f16; masked and padding positions are exact zeros.
        uint16_t* p16 = probs16 + j * stride;
        std::fill(p16, p16 + f, uint16_t{0});
        k.floatToHalf(sc + f, p16 + f, v - f);
        std::fill(p16 + v, p16 + pd, uint16_t{0});
        k.halfToFloat(p16, probs32 + j * stride, pd);
      }

      // kqv, for each run of tokens whose probabilities have the same padded length. A ring's
      // values are kept twice over, so the run from `base` is contiguous from its slot.
      const int64_t valueSlot = s.ringPeriod > 0 ? base % s.ringPeriod : base;
      for (int64_t ta = 0; ta < tn;) {
        const int64_t padded = (visibleOf(t0 + ta) + pad - 1) / pad * pad;
        int64_t tb = ta + 1;
        while (tb < tn && (visibleOf(t0 + tb) + pad - 1) / pad * pad == padded) ++tb;
        HalfDots kqv;
        kqv.rows = values + kvHead * hd * vStride + valueSlot;
        kqv.rowStride = vStride;
        kqv.count = hd;
        kqv.y16 = probs16 + ta * heads * stride;
        kqv.y32 = probs32 + ta * heads * stride;
        kqv.yStride = stride;
        kqv.queries = static_cast<int32_t>((tb - ta) * heads);
        kqv.n = padded - base;
        kqv.order = kqvOrder;
        kqv.out = outs + ta * heads * hd;
        kqv.outStride = hd;
        k.dotsF16(kqv);
        ta = tb;
      }
      for (int32_t j = 0; j < nq; ++j) {
        const int64_t t = t0 + j / heads, h = h0 + j % heads;
        std::copy_n(outs + j * hd, hd, out + t * qDim + h * hd);
      }
    }
  });
}

}  // namespace shoal::cpu
