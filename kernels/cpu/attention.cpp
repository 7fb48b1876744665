#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/kernel_table.h"

namespace shoal::cpu {
namespace {

// A work item's scratch stays within this many bytes per thread (scores and f16 probabilities
// of every position for each of its queries), and an item holds at most kMostQueries queries.
constexpr int64_t kItemBytes = int64_t{4} << 20;
constexpr int64_t kMostQueries = 32;
// Elements added to each query's row of scores and probabilities. The rows are a power of two
// long at common context lengths (valueStride()), so without this the probabilities that V·p
// reads side by side would all fall in the same L1 sets.
constexpr int64_t kRowSkew = 16;
// Small calls (attentionInPasses): positions per K·q work item, value rows per V·p work item.
constexpr int64_t kKeyBlock = 256;
constexpr int64_t kValueBlock = 16;

int32_t queriesPerItem(const AttentionShape& s) {
  const int64_t perQuery =
      (s.valueStride() + kRowSkew) * (4 + 2) + int64_t{s.headDim} * (2 + 4 + 4);
  return static_cast<int32_t>(std::clamp<int64_t>(kItemBytes / perQuery, 1, kMostQueries));
}

// x[i] *= scale (ggml_soft_max_ext: kq * scale + mask, 0 where visible); returns the largest,
// or -inf for n = 0. The maximum is kept in eight lanes (lane j: the elements i = j mod 8), so
// that the compiler can vectorize it: as one running maximum it was a serial chain of
// 3-cycle maxss, 11% of a verifying step's attention at a 1.6k context. Which lane holds
// which element does not change the result: a maximum of finite floats is exact in any order
// (of equal +0 and -0 either may come out, and x - max is the same for both).
float scaleAndMax(float* x, int64_t n, float scale) {
  constexpr int kLanes = 8;
  float lanes[kLanes];
  std::fill_n(lanes, kLanes, -INFINITY);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const float y = x[i + j] * scale;
      x[i + j] = y;
      lanes[j] = lanes[j] < y ? y : lanes[j];
    }
  }
  float best = -INFINITY;
  for (; i < n; ++i) {
    x[i] *= scale;
    best = best < x[i] ? x[i] : best;
  }
  for (float lane : lanes) best = best < lane ? lane : best;
  return best;
}

template <typename T>
T* slice(std::vector<T>& v, int thread, int64_t perThread) {
  return v.data() + static_cast<size_t>(thread) * static_cast<size_t>(perThread);
}

template <typename T>
T* grown(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}

// One attention() call: its arguments and the dot orders and padding they imply.
struct Call {
  const AttentionShape& s;
  const float* q;
  int32_t count;
  int32_t firstPosition;
  const uint16_t* keys;
  const uint16_t* values;
  int64_t hd;
  int64_t qDim;
  int32_t group;      // query heads per KV head
  DotOrder kqOrder;   // ggml: one token -> ggml_vec_dot_f16; a batch -> tinyBLAS when its shape
  DotOrder kqvOrder;  // allows (kq: K rows of headDim, a multiple of 16; kqv: a multiple of 4)
  int64_t pad;        // positions the V·p dots are padded to

  // Positions token t sees: [firstOf(t), visibleOf(t)); a sliding window hides those before.
  int64_t visibleOf(int64_t t) const { return firstPosition + t + 1; }
  int64_t firstOf(int64_t t) const {
    return s.window > 0 ? std::max<int64_t>(0, visibleOf(t) - s.window) : int64_t{0};
  }
  int64_t paddedOf(int64_t t) const { return (visibleOf(t) + pad - 1) / pad * pad; }
};

Call makeCall(const AttentionShape& s, const float* q, int32_t count, int32_t firstPosition,
              const uint16_t* keys, const uint16_t* values, int32_t orderTokens) {
  const int64_t hd = s.headDim;
  const int32_t batch = orderTokens > 0 ? orderTokens : count;
  const DotOrder kqOrder = batch >= 2 && hd % 16 == 0 ? DotOrder::Tiled : DotOrder::Vec;
  const DotOrder kqvOrder = batch >= 2 && hd % 4 == 0 ? DotOrder::Tiled : DotOrder::Vec;
  return Call{s,
              q,
              count,
              firstPosition,
              keys,
              values,
              hd,
              s.nHead * hd,
              s.nHead / s.nHeadKv,
              kqOrder,
              kqvOrder,
              kqvOrder == DotOrder::Tiled ? int64_t{16} : int64_t{64}};
}

// Query (token t, head h) as the f16 product takes it: rounded to f16 (ggml converts src1 to
// F16), and the same values as floats.
void roundQuery(const Call& c, int64_t t, int64_t h, uint16_t* q16, float* q32) {
  const KernelTable& k = kernels();
  k.floatToHalf(c.q + t * c.qDim + h * c.hd, q16, c.hd);
  k.halfToFloat(q16, q32, c.hd);
}

// K·q of nq rounded queries (hd apart) with KV head g's keys at positions [lo, hi), into
// scores[j * stride + p - base]. Each K·q is a dot of its own, so a ring's wrap may cut the run
// of keys in two, and any range of positions may be done apart from the others.
void keyDots(const Call& c, int64_t g, int64_t lo, int64_t hi, int64_t base, const uint16_t* q16,
             const float* q32, int32_t nq, float* scores, int64_t stride) {
  const AttentionShape& s = c.s;
  HalfDots kq;
  kq.rowStride = s.keyPositionStride();
  kq.y16 = q16;
  kq.y32 = q32;
  kq.yStride = c.hd;
  kq.queries = nq;
  kq.n = c.hd;
  kq.order = c.kqOrder;
  kq.outStride = stride;
  for (int64_t p = lo; p < hi;) {
    const int64_t slot = s.keySlot(p);
    const int64_t run = std::min(hi - p, s.keySlots() - slot);
    kq.rows = c.keys + g * s.keyHeadStride() + slot * s.keyPositionStride();
    kq.count = run;
    kq.out = scores + (p - base);
    kernels().dotsF16(kq);
    p += run;
  }
}

// Token t's head h: its scores sc (K·q, indexed from base) become probabilities, as f16 in p16
// and as floats back in sc, over [0, padded - base): masked and padding positions exact zeros.
void softmaxQuery(const Call& c, int64_t t, int32_t h, int64_t base, float* sc, uint16_t* p16) {
  const AttentionShape& s = c.s;
  const KernelTable& k = kernels();
  const int64_t visible = c.visibleOf(t), first = c.firstOf(t), padded = c.paddedOf(t);
  // The softmax sums groups of 16 from position 0, so it starts at the group holding `first`:
  // the fully masked groups before it add exact zeros.
  const int64_t from = first / 16 * 16;
  // Indices from here on count from `base`: [f, v) are the visible positions.
  const int64_t f = first - base, v = visible - base, fr = from - base, pd = padded - base;
  std::fill(sc + fr, sc + f, -INFINITY);
  if (s.softcap > 0) {
    const float invCap = 1.0f / s.softcap;
    for (int64_t p = f; p < v; ++p) sc[p] = std::tanh(sc[p] * invCap) * s.softcap;
  }
  float maxScore = scaleAndMax(sc + f, v - f, s.scale);
  if (s.sinks) maxScore = std::max(maxScore, s.sinks[h]);
  double sum = k.softmaxExp(sc + fr, maxScore, sc + fr, v - fr);
  if (s.sinks) sum += static_cast<double>(std::exp(s.sinks[h] - maxScore));
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t p = f; p < v; ++p) sc[p] *= inv;
  // kqv: probabilities enter as f16; masked and padding positions are exact zeros.
  std::fill(p16, p16 + f, uint16_t{0});
  k.floatToHalf(sc + f, p16 + f, v - f);
  std::fill(p16 + v, p16 + pd, uint16_t{0});
  k.halfToFloat(p16, sc, pd);
}

// V·p of tokens [t0, t0 + tn), `heads` queries each (query j: token t0 + j / heads), with value
// rows [r0, r1) of KV head g: outs[j * hd + r]. The probabilities (p16, p32: indexed from base,
// stride apart) go in runs of tokens whose probabilities have the same padded length. A ring's
// values are kept twice over, so the run from `base` is contiguous from its slot.
void valueDots(const Call& c, int64_t g, int64_t t0, int64_t tn, int32_t heads, int64_t base,
               const uint16_t* p16, const float* p32, int64_t stride, float* outs, int64_t r0,
               int64_t r1) {
  const AttentionShape& s = c.s;
  const int64_t vStride = s.valueStride();
  const int64_t valueSlot = s.ringPeriod > 0 ? base % s.ringPeriod : base;
  for (int64_t ta = 0; ta < tn;) {
    const int64_t padded = c.paddedOf(t0 + ta);
    int64_t tb = ta + 1;
    while (tb < tn && c.paddedOf(t0 + tb) == padded) ++tb;
    HalfDots kqv;
    kqv.rows = c.values + (g * c.hd + r0) * vStride + valueSlot;
    kqv.rowStride = vStride;
    kqv.count = r1 - r0;
    kqv.y16 = p16 + ta * heads * stride;
    kqv.y32 = p32 + ta * heads * stride;
    kqv.yStride = stride;
    kqv.queries = static_cast<int32_t>((tb - ta) * heads);
    kqv.n = padded - base;
    kqv.order = c.kqvOrder;
    kqv.out = outs + ta * heads * c.hd + r0;
    kqv.outStride = c.hd;
    kernels().dotsF16(kqv);
    ta = tb;
  }
}

// Small calls (decode, a few verifying rows): three passes over the whole call, each spread
// over every thread: K·q of every query of a KV head by blocks of positions, the softmax by
// query, V·p of every query of a KV head by blocks of value rows. Each key and value is read
// once per call, and all threads share it however few the heads: cut into items of heads, a
// decode step with two threads gave each of SmolLM2's 9 heads its own item, so its 3 KV heads'
// keys and values were read three times, and the attention at a 1.6k context ran no faster on
// two threads than on one. The dots are the same dots as in items, in the same order: the
// same bits.
void attentionInPasses(const Call& c, float* out, ThreadPool& pool, AttentionScratch& scratch) {
  const AttentionShape& s = c.s;
  const int64_t hd = c.hd, stride = scratch.stride;
  const int64_t perKv = int64_t{c.count} * c.group;  // queries per KV head: j = t * group + hh
  const int64_t nq = perKv * s.nHeadKv;
  uint16_t* q16 = grown(scratch.callQuery16, nq * hd);
  float* q32 = grown(scratch.callQuery32, nq * hd);
  float* scores = grown(scratch.callScores, nq * stride);
  uint16_t* probs16 = grown(scratch.callProbs16, nq * stride);
  float* outs = grown(scratch.callOuts, nq * hd);
  auto headOf = [&](int64_t query) {
    return static_cast<int32_t>(query / perKv * c.group + query % perKv % c.group);
  };
  auto tokenOf = [&](int64_t query) { return query % perKv / c.group; };
  for (int64_t j = 0; j < nq; ++j) roundQuery(c, tokenOf(j), headOf(j), q16 + j * hd, q32 + j * hd);

  const int64_t lo = c.firstOf(0), hi = c.visibleOf(c.count - 1);
  const int64_t base = lo / 64 * 64;
  const int64_t keyBlocks = (hi - lo + kKeyBlock - 1) / kKeyBlock;
  pool.parallelFor(s.nHeadKv * keyBlocks, [&](int64_t begin, int64_t end, int) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t g = item / keyBlocks, p0 = lo + item % keyBlocks * kKeyBlock;
      keyDots(c, g, p0, std::min(hi, p0 + kKeyBlock), base, q16 + g * perKv * hd,
              q32 + g * perKv * hd, static_cast<int32_t>(perKv), scores + g * perKv * stride,
              stride);
    }
  });
  pool.parallelFor(nq, [&](int64_t begin, int64_t end, int) {
    for (int64_t j = begin; j < end; ++j)
      softmaxQuery(c, tokenOf(j), headOf(j), base, scores + j * stride, probs16 + j * stride);
  });
  const int64_t valueBlocks = (hd + kValueBlock - 1) / kValueBlock;
  pool.parallelFor(s.nHeadKv * valueBlocks, [&](int64_t begin, int64_t end, int) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t g = item / valueBlocks, r0 = item % valueBlocks * kValueBlock;
      valueDots(c, g, 0, c.count, c.group, base, probs16 + g * perKv * stride,
                scores + g * perKv * stride, stride, outs + g * perKv * hd, r0,
                std::min(hd, r0 + kValueBlock));
    }
  });
  for (int64_t j = 0; j < nq; ++j)
    std::copy_n(outs + j * hd, hd, out + tokenOf(j) * c.qDim + headOf(j) * hd);
}

// Larger calls (prompts): items of `heads` heads sharing one KV head times a run of `tokens`
// tokens, each item from K·q to V·p on one thread, so that each key and value row is read once
// for all of an item's queries. The heads of a GQA group go together unless that leaves too few
// items to keep every thread busy.
void attentionInItems(const Call& c, float* out, ThreadPool& pool, AttentionScratch& scratch) {
  const AttentionShape& s = c.s;
  const int64_t hd = c.hd, stride = scratch.stride;
  const int threads = pool.size();
  int32_t heads = c.group, tokens = 1;
  int64_t items = 0;
  for (;; --heads) {
    if (heads > 1 && (c.group % heads != 0 || heads > scratch.queries)) continue;
    tokens = std::max(1, std::min(c.count, scratch.queries / heads));
    items = (c.count + tokens - 1) / tokens * (s.nHead / heads);
    if (heads == 1 || threads == 1 || items % threads == 0 || items >= 4 * threads) break;
  }
  const int64_t headBlocks = s.nHead / heads;

  pool.parallelFor(items, [&](int64_t begin, int64_t end, int thread) {
    const int64_t perQueries = scratch.queries;
    uint16_t* q16 = slice(scratch.query16, thread, perQueries * hd);
    float* q32 = slice(scratch.query32, thread, perQueries * hd);
    float* scores = slice(scratch.scores, thread, perQueries * stride);
    uint16_t* probs16 = slice(scratch.probs16, thread, perQueries * stride);
    float* outs = slice(scratch.outs, thread, perQueries * hd);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t0 = item / headBlocks * tokens;
      const int32_t h0 = static_cast<int32_t>(item % headBlocks) * heads;
      const int64_t g = h0 / c.group;
      const int64_t tn = std::min<int64_t>(tokens, c.count - t0);
      const int32_t nq = static_cast<int32_t>(tn * heads);  // query j: token t0 + j / heads
      for (int32_t j = 0; j < nq; ++j)
        roundQuery(c, t0 + j / heads, h0 + j % heads, q16 + j * hd, q32 + j * hd);
      // Every position any of the item's tokens sees; each token then reads its own range.
      // Scores and probabilities are indexed from `base`, the 64-position step that holds the
      // first of them: the steps before it would only add exact zeros to the dot products
      // (probability 0 times a finite value), so leaving them out changes no bit, and a
      // windowed layer reads its window rather than the whole context.
      const int64_t lo = c.firstOf(t0), hi = c.visibleOf(t0 + tn - 1);
      const int64_t base = lo / 64 * 64;
      keyDots(c, g, lo, hi, base, q16, q32, nq, scores, stride);
      for (int32_t j = 0; j < nq; ++j) {
        softmaxQuery(c, t0 + j / heads, h0 + j % heads, base, scores + j * stride,
                     probs16 + j * stride);
      }
      valueDots(c, g, t0, tn, heads, base, probs16, scores, stride, outs, 0, hd);
      for (int32_t j = 0; j < nq; ++j) {
        const int64_t t = t0 + j / heads, h = h0 + j % heads;
        std::copy_n(outs + j * hd, hd, out + t * c.qDim + h * hd);
      }
    }
  });
}

}  // namespace

void AttentionScratch::reserve(const AttentionShape& shape, int threads) {
  stride = shape.valueStride() + kRowSkew;
  headDim = shape.headDim;
  queries = queriesPerItem(shape);
  const size_t n = static_cast<size_t>(std::max(1, threads)) * static_cast<size_t>(queries);
  query16.assign(n * static_cast<size_t>(headDim), 0);
  query32.assign(n * static_cast<size_t>(headDim), 0.0f);
  scores.assign(n * static_cast<size_t>(stride), 0.0f);
  probs16.assign(n * static_cast<size_t>(stride), 0);
  outs.assign(n * static_cast<size_t>(headDim), 0.0f);
}

void attention(const AttentionShape& s, const float* q, int32_t count, int32_t firstPosition,
               const uint16_t* keys, const uint16_t* values, float* out, ThreadPool& pool,
               AttentionScratch& scratch, int32_t orderTokens) {
  const Call c = makeCall(s, q, count, firstPosition, keys, values, orderTokens);
  const int64_t callBytes = int64_t{count} * s.nHead * scratch.stride * (4 + 2);
  if (callBytes <= scratch.passBytes)
    attentionInPasses(c, out, pool, scratch);
  else
    attentionInItems(c, out, pool, scratch);
}

}  // namespace shoal::cpu
