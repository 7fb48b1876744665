#pragma once
// The cost model of a pipeline plan: the one place where its formulas live. The planner's search,
// the tests and the simulator all evaluate plans through these functions.
//
// A stage holds a contiguous layer range [a, a + k). Sums over the range (Σ, per layer l):
//   memory of a stage   Σ (W_l + S·min(C, w_l)·K_l) + first·E + last·H  ≤ M
//   stage time          t = max((Σ R_l + last·H) / B, (Σ F_l + last·FH) / P)
//   hop between stages  latency + A / bandwidth of the node pair (intra_node on one node)
//   token return        latency of the pair last → first node (0 on one node)
//   pipeline latency    T = Σ stage times + Σ hops + token return
//   pipeline throughput X_p = min(S / T, 1 / max(every stage time, hop and return))
//   pool throughput     X = Σ X_p
//
// first/last are 1 for the first/last stage of the pipeline; w_l = 0 (no window) counts as C.
// When the layers are alike (ModelCost::perLayer empty) the sums are k·(W + C·S·K), k·W and k·F,
// computed as those products.

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "engine/plan/types.h"

namespace shoal::plan {

// The sums of the layer costs over one layer range, for one request.
struct RangeCost {
  double residentBytes = 0;  // Σ (W_l + S·min(C, w_l)·K_l): weights plus KV cache
  double weightBytes = 0;    // Σ W_l
  double readBytes = 0;      // Σ R_l: weight bytes read per decoded token
  double flops = 0;          // Σ F_l: per decoded token
};

// Prefix sums over the layers of one model for one request: the costs of any layer range in
// O(1). The search asks for many ranges; the functions below that take a layer range compute
// the same sums (bit for bit) without the table.
class LayerSums {
 public:
  LayerSums(const ModelCost& model, const Request& request);

  int layers() const { return m_layers; }
  bool uniform() const { return m_uniform; }
  // Layers [first, first + count); throws shoal::Error when that is not inside [0, L]. Inline:
  // the search asks for millions of ranges.
  RangeCost range(int first, int count) const {
    if (first < 0 || count < 0 || first > m_layers - count) throwOutside(first, count);
    if (m_uniform) {
      const double k = static_cast<double>(count);
      return {k * m_one.residentBytes, k * m_one.weightBytes, k * m_one.readBytes, k * m_one.flops};
    }
    const RangeCost& a = m_prefix[static_cast<size_t>(first)];
    const RangeCost& b = m_prefix[static_cast<size_t>(first + count)];
    return {b.residentBytes - a.residentBytes, b.weightBytes - a.weightBytes,
            b.readBytes - a.readBytes, b.flops - a.flops};
  }
  // Layers whose costs differ only: the sums of layers [0, l), 0 <= l <= L.
  const RangeCost& prefix(int l) const { return m_prefix[static_cast<size_t>(l)]; }

 private:
  [[noreturn]] void throwOutside(int first, int count) const;

  int m_layers = 0;
  bool m_uniform = true;
  RangeCost m_one;                  // alike layers: the costs of one
  std::vector<RangeCost> m_prefix;  // otherwise: sums of layers [0, l), L + 1 entries
};

// The sums of layers [first, first + count) (O(first + count) when the layers differ).
RangeCost rangeCost(const ModelCost& model, const Request& request, int first, int count);

// Mean bytes one layer takes on a device, weights plus the KV cache of S sequences of C tokens:
// W + C·S·K when the layers are alike.
double perLayerBytes(const ModelCost& model, const Request& request);

// Memory of the embedding and/or head a stage holds (a tied matrix counted once).
inline double embedHeadBytes(const ModelCost& model, bool hasEmbed, bool hasHead) {
  return (hasEmbed ? model.embedBytes : 0.0) + (hasHead ? model.headBytes : 0.0) -
         (hasEmbed && hasHead ? model.sharedEmbedHeadBytes : 0.0);
}

// Memory a stage needs.
inline double stageMemoryBytes(const ModelCost& model, const RangeCost& layers, bool hasEmbed,
                               bool hasHead) {
  return layers.residentBytes + embedHeadBytes(model, hasEmbed, hasHead);
}
// Memory the whole model takes once split over two or more devices: every layer, the embedding on
// the first and the head on the last — a tied matrix then lives on both ends (what a one-stage
// plan, stageMemoryBytes(..., true, true), keeps once).
double splitMemoryBytes(const ModelCost& model, const Request& request);

double stageMemoryBytes(const ModelCost& model, const Request& request, int firstLayer, int layers,
                        bool hasEmbed, bool hasHead);

// t_i of a stage on `device` (the head adds to the last stage).
inline double stageTimeS(const Device& device, const ModelCost& model, const RangeCost& layers,
                         bool hasHead) {
  const double bytes = layers.readBytes + (hasHead ? model.headBytes : 0.0);
  const double flops = layers.flops + (hasHead ? model.headFlopsPerToken : 0.0);
  return std::max(bytes / device.bandwidthBytesPerS, flops / device.flopsPerS);
}
double stageTimeS(const Device& device, const ModelCost& model, int firstLayer, int layers,
                  bool hasHead);

// Most layers `device` can hold in the given role, clipped to [0, L]; 0 when not even the
// embedding/head fits. The first stage's range starts at layer 0 and the last's ends at L, so
// those roles are exact; for a middle stage (and a stage with both) it is the longest range
// that fits anywhere, an upper bound when the layers differ.
int layerCapacity(const Device& device, const ModelCost& model, const Request& request,
                  bool hasEmbed, bool hasHead);
int layerCapacity(const Device& device, const ModelCost& model, const LayerSums& sums,
                  bool hasEmbed, bool hasHead);

// Node-pair links of a pool resolved into a dense table over node indices.
class LinkTable {
 public:
  // Throws shoal::Error naming the node pair when two nodes of the pool have no link entry and
  // the pool has no default link.
  explicit LinkTable(const Pool& pool);

  int nodeCount() const { return static_cast<int>(m_nodeNames.size()); }
  int nodeOfDevice(int device) const { return m_deviceNode[static_cast<size_t>(device)]; }
  const std::string& nodeName(int node) const { return m_nodeNames[static_cast<size_t>(node)]; }
  // The link between two nodes (intra_node when they are the same).
  const Link& between(int nodeA, int nodeB) const;

 private:
  std::vector<std::string> m_nodeNames;  // in order of first appearance in Pool::devices
  std::vector<int> m_deviceNode;
  std::vector<Link> m_links;  // nodeCount² entries, row-major
};

// Time to send one token's activation from a stage on nodeA to the next on nodeB.
double hopTimeS(const LinkTable& links, const ModelCost& model, int nodeA, int nodeB);
// Time for the sampled token to get back from the last stage's node to the first's.
double returnTimeS(const LinkTable& links, int lastNode, int firstNode);

// X_p from a pipeline's latency and its slowest stage, hop or return.
double pipelineThroughput(double sequences, double latencyS, double slowestStepS);

struct PipelineMetrics {
  std::vector<double> stageS;  // per stage
  std::vector<double> linkS;   // hops between consecutive stages, then the token return
  double latencyS = 0;         // T_p
  double throughputTokS = 0;   // X_p
};

// Evaluates one pipeline as given (ranges are not checked here; see planViolations).
PipelineMetrics evaluatePipeline(const Pool& pool, const LinkTable& links, const ModelCost& model,
                                 const Request& request, std::span<const StageAssignment> stages);

// Time to the first token of a `promptTokens`-token prompt on a pipeline (pipelined prefill):
// the prompt in chunks of at most `chunkTokens` (the chain's micro-batches) that follow one
// another through the stages, so the first chunk crosses every stage, hop and the return, and
// each further chunk adds the slowest step. A stage's chunk time is the larger of its weight
// reads (R / B: weights are read once per chunk) and c·ΣF / P; the head runs for the last row
// only. Attention's growth with the context is not counted (a few percent for short prompts of
// large models, more for small models and long prompts).
double prefillTimeS(const Pool& pool, const LinkTable& links, const ModelCost& model,
                    std::span<const StageAssignment> stages, int promptTokens, int chunkTokens);

// Fills stageS, latencyS and throughputTokS of every pipeline and the plan's throughput.
void evaluatePlan(const Pool& pool, const ModelCost& model, const Request& request, Plan& plan);
void evaluatePlan(const Pool& pool, const LinkTable& links, const ModelCost& model,
                  const Request& request, Plan& plan);

// Every way the plan breaks the rules: a pipeline's ranges not contiguous from 0 to L, an empty
// stage or one outside the model, a device used twice or unknown, a stage over its device's memory.
// Empty when valid.
std::vector<std::string> planViolations(const Pool& pool, const ModelCost& model,
                                        const Request& request, const Plan& plan);

}  // namespace shoal::plan
