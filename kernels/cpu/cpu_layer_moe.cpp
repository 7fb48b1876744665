// The mixture-of-experts FFN on the CPU (LayerRunner::moeFfn), as llama.cpp's build_moe_ffn
// evaluates it on ggml-cpu, so that logits stay bit-identical:
//  * router logits: a plain matmul of the F32 router (tinyBLAS order for 2+ tokens, as for any
//    F32 product), plus its bias (ggml_add) when the layer has biases;
//  * Softmax gating: probabilities by ggml_soft_max per row (the exp of whole groups of 16
//    vectorized, the rest libm's expf, summed in double, then scaled by 1/sum); SoftmaxWeight
//    gating ranks the logits themselves;
//  * experts: ggml_argsort (std::sort, descending) and its first `used` entries;
//  * weights: the chosen probabilities (SoftmaxWeight: ggml_soft_max over the chosen logits),
//    divided by their sum (ggml_sum_rows in double, clamped below at 2^-14, ggml_div) when
//    normalizeWeights;
//  * each expert's products: ggml's mul_mat_id quantizes each input row once and takes a
//    K-quant's tiled order when 8+ rows go to that expert, vec_dot otherwise (float weights:
//    always vec_dot); the experts' biases (ggml_add_id) after each product; SwiGLU (or the
//    clamped SwiGLU) per row of the expert's width;
//  * output: each expert output times its weight (ggml_mul), then summed in rank order
//    (ggml_add, one rounding each).
// Only the chosen experts' weights are read. Rows are grouped per expert so that each expert's
// matrices are read once per batch. Batch invariance: the tiled/vec choice counts the rows of
// each segment (sequence) separately, so a sequence's results do not depend on the others.

#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_layer_ops.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/swiglu_oai.h"

namespace shoal::cpu {
namespace {

size_t sz(int64_t v) { return static_cast<size_t>(v); }

constexpr int64_t kTiledRows = 8;  // ggml_tiled_min_batch
constexpr int64_t kTileRows = 16;  // rows of an expert matrix per work item

// The dot order of one expert product over a group of rows: `tiled` when its rows come from
// segments that route 8+ rows to the expert.
int64_t orderTokens(const WeightMatrix& w, bool tiled) {
  return hasTiledOrder(w.kind) && tiled ? kTiledRows : 1;
}

// ggml_soft_max of one row in place (no mask, scale 1).
void softmaxRow(float* p, int64_t n) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = max > p[i] ? max : p[i];  // ggml's MAX
  const int64_t full = n - n % 16;
  double sum = full > 0 ? kernels().softmaxExp(p, max, p, full) : 0.0;
  for (int64_t i = full; i < n; ++i) {
    const float v = std::exp(p[i] - max);  // expf, as ggml_vec_soft_max_f32's scalar tail
    sum += static_cast<double>(v);
    p[i] = v;
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) p[i] *= inv;
}

}  // namespace

void LayerRunner::moeFfn(const BoundOp& op, int32_t layer) {
  const model::MoeParams& moe = op.op.moe;
  const int64_t experts = moe.experts, used = moe.used;
  const WeightMatrix& router = op.matrices[0];
  const int64_t in = router.cols, out = op.experts[2].first.rows;
  const float* src = buffer(op.op.src);
  float* dst = buffer(op.op.dst);
  MoeScratch& s = m_moe;

  // Router logits, then probabilities, per row.
  float* probs = s.probs.data();
  for (const RowRun& run : m_runs) {
    matmul(router, src + run.first * in, run.rows, probs + run.first * experts, *m_pool,
           m_matmulScratch, run.orderTokens);
  }
  observe("ffn_moe_logits", layer, probs, m_rows, experts);
  if (moe.biases) {
    const float* bias = op.moeBiases[0];
    for (int64_t t = 0; t < m_rows; ++t) {
      for (int64_t e = 0; e < experts; ++e) probs[t * experts + e] += bias[e];
    }
    observe("ffn_moe_logits_biased", layer, probs, m_rows, experts);
  }
  if (moe.gating == model::MoeGating::Softmax) {
    for (int64_t t = 0; t < m_rows; ++t) softmaxRow(probs + t * experts, experts);
    observe("ffn_moe_probs", layer, probs, m_rows, experts);
  }

  // The chosen experts and their weights.
  for (int64_t t = 0; t < m_rows; ++t) {
    const float* p = probs + t * experts;
    for (int64_t e = 0; e < experts; ++e) s.ranking[sz(e)] = static_cast<int32_t>(e);
    std::sort(s.ranking.begin(), s.ranking.begin() + experts,
              [p](int32_t a, int32_t b) { return p[a] > p[b]; });
    int32_t* chosen = &s.chosen[sz(t * used)];
    float* w = &s.weights[sz(t * used)];
    for (int64_t k = 0; k < used; ++k) {
      chosen[k] = s.ranking[sz(k)];
      w[k] = p[chosen[k]];
    }
    if (moe.gating == model::MoeGating::SoftmaxWeight) softmaxRow(w, used);
    if (moe.normalizeWeights) {
      double total = 0;
      for (int64_t k = 0; k < used; ++k) total += static_cast<double>(w[k]);
      const float sum = std::max(static_cast<float>(total), 6.103515625e-5f);  // ggml_clamp
      for (int64_t k = 0; k < used; ++k) w[k] = w[k] / sum;
    }
  }

  observe(moe.normalizeWeights                            ? "ffn_moe_weights_norm"
          : moe.gating == model::MoeGating::SoftmaxWeight ? "ffn_moe_weights_softmax"
                                                          : "ffn_moe_weights",
          layer, s.weights.data(), m_rows, used);

  // Group the (row, k) entries by expert and dot order: group 2e holds the rows of segments
  // that send 8+ rows to expert e (unless the segment asks for decode order), group 2e + 1 the
  // others; rows ascending within a group.
  const int64_t groups = experts * 2;
  int32_t* offset = s.perExpert.data();  // groups + 1
  std::fill(offset, offset + groups + 1, 0);
  auto forEachEntry = [&](auto&& visit) {
    int64_t row = 0;
    for (const runtime::Segment& seg : m_segments) {
      const int64_t rows = liveRows(seg);
      std::fill(s.segmentCount.begin(), s.segmentCount.end(), 0);
      for (int64_t i = row * used; i < (row + rows) * used; ++i)
        ++s.segmentCount[sz(s.chosen[sz(i)])];
      for (int64_t i = row * used; i < (row + rows) * used; ++i) {
        const int32_t e = s.chosen[sz(i)];
        const bool tiled = !seg.decodeOrder && s.segmentCount[sz(e)] >= kTiledRows;
        visit(i, e * 2 + (tiled ? 0 : 1));
      }
      row += rows;
    }
  };
  forEachEntry([&](int64_t, int64_t g) { ++offset[g + 1]; });
  for (int64_t g = 0; g < groups; ++g) offset[g + 1] += offset[g];
  {
    std::vector<int32_t>& fill = s.nextFree;
    std::copy(offset, offset + groups, fill.begin());
    forEachEntry([&](int64_t entry, int64_t g) {
      s.routed[sz(fill[sz(g)]++)] = static_cast<int32_t>(entry);
    });
  }

  runExperts(op, src, groups);

  // dst = sum over k of output(row, k) * w_k: each product rounded, then added in rank order.
  for (int64_t t = 0; t < m_rows; ++t) {
    float* d = dst + t * out;
    const float* w = &s.weights[sz(t * used)];
    const int32_t* at = &s.placeOf[sz(t * used)];
    const float* o = s.down.data() + at[0] * out;
    for (int64_t i = 0; i < out; ++i) d[i] = o[i] * w[0];
    for (int64_t k = 1; k < used; ++k) {
      const float* ok = s.down.data() + at[k] * out;
      for (int64_t i = 0; i < out; ++i) {
        const float weighted = ok[i] * w[k];
        d[i] = d[i] + weighted;
      }
    }
  }
}

// Every group through its expert, in three passes of the thread pool for the whole batch (not
// three per expert: a decode step routes each token to `used` experts, and per-expert
// dispatches would cost more than the products of one row):
//  1. each routed entry's input row converted to the gate/up activation formats, in group order;
//  2. gate and up of every group, by tiles of 16 rows (SwiGLU rounds vectors of 16 from each row's
//     start, so tiles start on multiples of 16 of a group's rows and the last one ends it);
//  3. the SwiGLU rows converted for down, then down of every group, by tiles of 16 rows.
// Each product gets its expert's bias right after it when the layer has biases.
// Results stay in group order (s.down); s.placeOf says where each (row, k) went.
void LayerRunner::runExperts(const BoundOp& op, const float* src, int64_t groups) {
  MoeScratch& s = m_moe;
  const KernelTable& k = kernels();
  const int64_t used = op.op.moe.used;
  const ExpertMatrices &gates = op.experts[0], &ups = op.experts[1], &downs = op.experts[2];
  const int64_t in = gates.first.cols, width = gates.first.rows, out = downs.first.rows;
  const int32_t* offset = s.perExpert.data();
  const int64_t entries = offset[groups];
  for (int64_t i = 0; i < entries; ++i) s.placeOf[sz(s.routed[sz(i)])] = static_cast<int32_t>(i);

  // Tiles of 16 rows of every non-empty group, for a matrix of `rows` rows.
  auto tilesOf = [&](int64_t rows) {
    s.tiles.clear();
    for (int64_t g = 0; g < groups; ++g) {
      if (offset[g + 1] == offset[g]) continue;
      for (int64_t r = 0; r < rows; r += kTileRows) {
        s.tiles.push_back({static_cast<int32_t>(g), static_cast<int32_t>(r),
                           static_cast<int32_t>(std::min(rows, r + kTileRows))});
      }
    }
  };
  auto argsOf = [&](const WeightMatrix& w, const uint8_t* act, int64_t g, float* y, int64_t ldy) {
    const int64_t first = offset[g], n = offset[g + 1] - first;
    GemmArgs a;
    a.weights = w.data;
    a.weightStride = w.rowBytes;
    a.actStride = w.activationBytes();
    a.act = act + static_cast<size_t>(first) * a.actStride;
    a.tokens = n;
    a.cols = w.cols;
    a.y = y + first * ldy;
    a.ldy = ldy;
    a.order = dotOrder(w, orderTokens(w, g % 2 == 0));
    a.rowGroups = w.rowGroups;
    return a;
  };

  // 1. Inputs, converted once per format.
  m_matmulScratch.reserve(gates.first, entries);
  m_matmulScratch.reserve(ups.first, entries);
  uint8_t* gateAct = m_matmulScratch.activations[static_cast<int>(gates.first.activation)].data();
  uint8_t* upAct = m_matmulScratch.activations[static_cast<int>(ups.first.activation)].data();
  const bool sameAct = gates.first.activation == ups.first.activation;
  m_pool->parallelFor(entries, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const float* x = src + (s.routed[sz(i)] / used) * in;
      k.convert[static_cast<int>(gates.first.activation)](
          x, gateAct + static_cast<size_t>(i) * gates.first.activationBytes(), in);
      if (!sameAct) {
        k.convert[static_cast<int>(ups.first.activation)](
            x, upAct + static_cast<size_t>(i) * ups.first.activationBytes(), in);
      }
    }
  });

  // The expert's bias row over [begin, end) of each of the group's product rows (ggml_add_id).
  const bool biased = op.op.moe.biases;
  auto addBias = [&](const float* biases, int64_t ld, const MoeScratch::Tile& tile, float* y) {
    const float* b = biases + (tile.group / 2) * ld;
    for (int64_t i = offset[tile.group]; i < offset[tile.group + 1]; ++i) {
      for (int64_t r = tile.begin; r < tile.end; ++r) y[i * ld + r] += b[r];
    }
  };
  const bool clamped = op.op.activation == model::Activation::SwigluOai;

  // 2. Gate, up and SwiGLU.
  float* gate = s.gate.data();
  float* up = s.up.data();
  tilesOf(width);
  m_pool->parallelFor(static_cast<int64_t>(s.tiles.size()), [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      const MoeScratch::Tile& tile = s.tiles[sz(t)];
      const int64_t e = tile.group / 2;
      const WeightMatrix wg = gates.expert(e), wu = ups.expert(e);
      k.gemm[static_cast<int>(wg.kind)](argsOf(wg, gateAct, tile.group, gate, width), tile.begin,
                                        tile.end);
      k.gemm[static_cast<int>(wu.kind)](argsOf(wu, upAct, tile.group, up, width), tile.begin,
                                        tile.end);
      if (biased) {
        addBias(op.moeBiases[1], width, tile, gate);
        addBias(op.moeBiases[2], width, tile, up);
      }
      for (int64_t i = offset[tile.group]; i < offset[tile.group + 1]; ++i) {
        float* g = gate + i * width + tile.begin;
        const float* u = up + i * width + tile.begin;
        if (clamped) {
          swigluOai(g, u, g, tile.end - tile.begin);
        } else {
          k.swiglu(g, u, g, tile.end - tile.begin);
        }
      }
    }
  });

  // 3. Down.
  m_matmulScratch.reserve(downs.first, entries);
  uint8_t* downAct = m_matmulScratch.activations[static_cast<int>(downs.first.activation)].data();
  m_pool->parallelFor(entries, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      k.convert[static_cast<int>(downs.first.activation)](
          gate + i * width, downAct + static_cast<size_t>(i) * downs.first.activationBytes(),
          width);
    }
  });
  float* down = s.down.data();
  tilesOf(out);
  m_pool->parallelFor(static_cast<int64_t>(s.tiles.size()), [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      const MoeScratch::Tile& tile = s.tiles[sz(t)];
      const WeightMatrix wd = downs.expert(tile.group / 2);
      k.gemm[static_cast<int>(wd.kind)](argsOf(wd, downAct, tile.group, down, out), tile.begin,
                                        tile.end);
      if (biased) addBias(op.moeBiases[3], out, tile, down);
    }
  });
}

}  // namespace shoal::cpu
