#pragma once
// The planner's vocabulary: what a pool, a model and a request look like to the cost model, and
// what a plan is. Every quantity is in bytes, seconds, FLOPs or tokens; the symbols in the
// comments (W, F, K, ...) are the ones docs/planner.md and cost_model.h use; a subscript l
// (W_l) is layer l's own figure.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shoal::plan {

// One accelerator (or CPU) that can hold a stage.
struct Device {
  std::string id;                 // unique in the pool
  std::string node;               // the machine it sits in; links are per node pair
  double memoryBytes = 0;         // M: memory the stage may use (weights + KV cache)
  double bandwidthBytesPerS = 0;  // B: memory bandwidth, > 0
  double flopsPerS = 0;           // P: sustained FLOP/s, > 0
};

// A network (or bus) path between two stages.
struct Link {
  double latencyS = 0;            // one-way latency
  double bandwidthBytesPerS = 0;  // > 0
};

// A link between two distinct nodes; symmetric.
struct NodeLink {
  std::string nodeA;
  std::string nodeB;
  Link link;
};

struct Pool {
  std::vector<Device> devices;
  std::vector<NodeLink> links;      // at most one entry per unordered node pair
  Link intraNode{1e-5, 2.5e10};     // between two devices of one node (PCIe-class default)
  std::optional<Link> defaultLink;  // for node pairs `links` does not list (large pools)
};

// The costs of one layer. Layers of one model may differ: a sliding-window layer caches at most
// `window` positions, an MoE layer reads only its active experts per token, a layer may simply
// be heavier than the others.
struct LayerCost {
  double weightBytes = 0;         // W_l: bytes of its weights (resident on the device)
  double readBytesPerToken = 0;   // R_l: weight bytes one decoded token reads (MoE: shared
                                  // tensors plus the active experts; dense: W_l)
  double flopsPerToken = 0;       // F_l: FLOPs of one token
  double kvBytesPerPosition = 0;  // K_l: KV-cache bytes of one cached position of one sequence
  int64_t window = 0;             // w_l: 0 caches the whole context; w > 0 at most w positions
  bool operator==(const LayerCost&) const = default;
};

// Per-layer and per-token costs of one model (docs/planner.md "cost model").
struct ModelCost {
  int layers = 0;  // L
  // The figures of every layer when `perLayer` is empty (then R = W and no window). When
  // `perLayer` is given they are its means, for display; the cost model reads `perLayer`.
  double layerWeightBytes = 0;         // W
  double layerFlopsPerToken = 0;       // F
  double kvBytesPerTokenPerLayer = 0;  // K: KV-cache bytes one token adds to one layer
  // L entries when the layers differ; empty when they are all alike.
  std::vector<LayerCost> perLayer;
  double hiddenBytesPerToken = 0;  // A: activation sent from one stage to the next
  double embedBytes = 0;           // E: token embedding (first stage)
  double headBytes = 0;            // H: final norm + output head (last stage)
  // Bytes E and H have in common: with a tied output the head reads token_embd, so a stage that
  // holds both (a one-stage plan) keeps that matrix once.
  double sharedEmbedHeadBytes = 0;
  double headFlopsPerToken = 0;  // FH: FLOPs of the head for one token

  bool uniform() const { return perLayer.empty(); }
};

struct Request {
  int64_t contextTokens = 4096;  // C: KV cache is sized for this many tokens per sequence
  int64_t sequences = 1;         // S: concurrent sequences each pipeline holds KV for
};

// One stage: a device and its half-open layer range [firstLayer, lastLayer). The first stage of
// a pipeline also holds the embedding, the last one the head.
struct StageAssignment {
  int device = -1;       // index into Pool::devices of the pool the plan was made for
  std::string deviceId;  // the same device by id (stable across pools, for re-planning)
  int firstLayer = 0;
  int lastLayer = 0;
  double stageS = 0;  // t_i, filled by evaluation
};

struct Pipeline {
  std::vector<StageAssignment> stages;  // in execution order
  double latencyS = 0;                  // T_p: stages + links + token return
  double throughputTokS = 0;            // X_p
};

struct Plan {
  bool feasible = false;
  // When infeasible: why, and how many more bytes of memory the pool would need (0 if the
  // shortfall is not about memory).
  std::string infeasibleReason;
  double missingBytes = 0;

  std::vector<Pipeline> pipelines;
  double throughputTokS = 0;               // X = sum of X_p
  std::vector<std::string> unusedDevices;  // ids, in pool order
};

struct PlanOptions {
  // Among plans whose X is within this fraction of the best, the one with the smallest
  // largest T_p wins (the 1% rule). 0 turns the tie-break off (pure max X).
  double latencyTolerance = 0.01;
  // Pools with at most this many usable devices are solved exhaustively (every ordered device
  // sequence, every pipeline partition) when that means at most exactSequenceBudget sequences.
  // Devices of one node are interchangeable in mid-pipeline, so few-node pools of 10 devices
  // qualify, while 9 devices on 9 nodes (986,409 sequences) do not.
  int exactDeviceLimit = 10;
  double exactSequenceBudget = 150000;
  // Improvement passes of the local search in the heuristic (larger pools).
  int maxLocalSearchPasses = 6;
  // At most this many pipelines (0: as many as maximize X). 1 with sequences = 1 is "the fastest
  // single chat": the home default, where a second replica would only take devices from the
  // one pipeline the user talks to.
  int maxPipelines = 0;
};

}  // namespace shoal::plan
