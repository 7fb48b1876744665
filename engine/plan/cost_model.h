#pragma once
// The cost model of a pipeline plan: the one place where its formulas live. The planner's search,
// the tests and the simulator all evaluate plans through these functions.
//
//   memory of a stage   k·(W + C·S·K) + first·E + last·H  ≤ M
//   stage time          t = max((k·W + last·H) / B, (k·F + last·FH) / P)
//   hop between stages  latency + A / bandwidth of the node pair (intra_node on one node)
//   token return        latency of the pair last → first node (0 on one node)
//   pipeline latency    T = Σ stage times + Σ hops + token return
//   pipeline throughput X_p = min(S / T, 1 / max(every stage time, hop and return))
//   pool throughput     X = Σ X_p
//
// k is the stage's layer count, first/last are 1 for the first/last stage of the pipeline.

#include <span>
#include <string>
#include <vector>

#include "engine/plan/types.h"

namespace shoal::plan {

// Bytes one layer takes on a device: its weights plus the KV cache of S sequences of C tokens.
double perLayerBytes(const ModelCost& model, const Request& request);

// Memory a stage of `layers` layers needs.
double stageMemoryBytes(const ModelCost& model, const Request& request, int layers, bool hasEmbed,
                        bool hasHead);

// t_i of a stage of `layers` layers on `device` (the head adds to the last stage).
double stageTimeS(const Device& device, const ModelCost& model, int layers, bool hasHead);

// Most layers `device` can hold in the given role, clipped to [0, L]; 0 when not even the
// embedding/head fits.
int layerCapacity(const Device& device, const ModelCost& model, const Request& request,
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

// Fills stageS, latencyS and throughputTokS of every pipeline and the plan's throughput.
void evaluatePlan(const Pool& pool, const ModelCost& model, const Request& request, Plan& plan);
void evaluatePlan(const Pool& pool, const LinkTable& links, const ModelCost& model,
                  const Request& request, Plan& plan);

// Every way the plan breaks the rules: a pipeline's ranges not contiguous from 0 to L, an empty
// stage, a device used twice or unknown, a stage over its device's memory. Empty when valid.
std::vector<std::string> planViolations(const Pool& pool, const ModelCost& model,
                                        const Request& request, const Plan& plan);

}  // namespace shoal::plan
