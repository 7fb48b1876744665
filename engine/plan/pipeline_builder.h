#pragma once
// Internal to the planner: a precomputed view of a pool for the search, the optimal layer split
// of one ordered pipeline, and the ordering of a set of devices into a pipeline.

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/plan/cost_model.h"
#include "engine/plan/types.h"

namespace shoal::plan::detail {

// Everything the search asks about devices and links many times, computed once per plan() call
// from the cost-model formulas.
class SearchContext {
 public:
  SearchContext(const Pool& pool, const ModelCost& model, const Request& request);

  // Unique per context made (in this process): what a cache of results may be keyed by.
  uint64_t id() const { return m_id; }
  const Pool& pool() const { return m_pool; }
  const ModelCost& model() const { return m_model; }
  const Request& request() const { return m_request; }
  const LinkTable& links() const { return m_links; }
  const LayerSums& sums() const { return m_sums; }
  int layers() const { return m_model.layers; }
  // All layers alike (ModelCost::perLayer empty): a stage's costs depend on its layer count only.
  bool uniform() const { return m_sums.uniform(); }
  double sequences() const { return static_cast<double>(m_request.sequences); }
  int deviceCount() const { return static_cast<int>(m_pool.devices.size()); }

  int node(int device) const { return m_node[static_cast<size_t>(device)]; }
  // Devices of one class may swap places in the middle of a pipeline (with their layer counts)
  // without changing any cost: those of one node when the layers are alike, each device its own
  // class when the layers differ (a device then costs what the layers at its place cost).
  int orderClass(int device) const {
    return uniform() ? node(device) : static_cast<int>(m_nodes) + device;
  }
  // Time per layer of a stage that does not hold the head (stage time is linear in k then);
  // the mean over the layers when they differ (for ordering devices only).
  double layerTimeS(int device) const { return m_layerTime[static_cast<size_t>(device)]; }
  // max(H/B, FH/P): what the head alone costs on the device.
  double headTimeS(int device) const { return m_headTime[static_cast<size_t>(device)]; }
  // layerCapacity() of the device in the role (an upper bound for a middle stage when the
  // layers differ; fitsRange() is exact).
  int capacity(int device, bool first, bool last) const {
    return m_cap[static_cast<size_t>(device) * 4 + (first ? 1 : 0) + (last ? 2 : 0)];
  }
  // Whether layers [firstLayer, firstLayer + count) fit the device in the role.
  bool fitsRange(int device, int firstLayer, int count, bool first, bool last) const {
    return stageMemoryBytes(m_model, m_sums.range(firstLayer, count), first, last) <=
           m_pool.devices[static_cast<size_t>(device)].memoryBytes;
  }
  // t_i of layers [firstLayer, firstLayer + count) on the device.
  double stageS(int device, int firstLayer, int count, bool last) const {
    return stageTimeS(m_pool.devices[static_cast<size_t>(device)], m_model,
                      m_sums.range(firstLayer, count), last);
  }
  double hopS(int fromDevice, int toDevice) const {
    return m_hop[static_cast<size_t>(node(fromDevice)) * m_nodes +
                 static_cast<size_t>(node(toDevice))];
  }
  double returnS(int lastDevice, int firstDevice) const {
    return m_return[static_cast<size_t>(node(lastDevice)) * m_nodes +
                    static_cast<size_t>(node(firstDevice))];
  }
  double nodeHopS(int nodeA, int nodeB) const {
    return m_hop[static_cast<size_t>(nodeA) * m_nodes + static_cast<size_t>(nodeB)];
  }
  double nodeReturnS(int nodeA, int nodeB) const {
    return m_return[static_cast<size_t>(nodeA) * m_nodes + static_cast<size_t>(nodeB)];
  }
  // Layers that differ: 1 when every layer alone is bandwidth-bound on the device (R_l / B ≥
  // F_l / P, so any range without the head is: t = ΣR / B), -1 when every one is compute-bound
  // (t = ΣF / P), 0 otherwise. Lets the range split use a sliding-window minimum.
  int boundKind(int device) const { return m_bound[static_cast<size_t>(device)]; }
  // A device that can hold at least one layer as a middle stage.
  bool usable(int device) const { return capacity(device, false, false) >= 1; }

 private:
  uint64_t m_id = 0;
  const Pool& m_pool;
  const ModelCost& m_model;
  const Request& m_request;
  LinkTable m_links;
  LayerSums m_sums;
  size_t m_nodes = 0;
  std::vector<int> m_node;
  std::vector<double> m_layerTime;
  std::vector<double> m_headTime;
  std::vector<int> m_cap;        // 4 per device: middle, first, last, first+last
  std::vector<int> m_bound;      // per device: boundKind()
  std::vector<double> m_hop;     // node × node
  std::vector<double> m_return;  // node × node
};

// A pipeline the search has evaluated.
struct PipelineResult {
  bool feasible = false;
  double throughput = 0;    // X_p
  double latency = 0;       // T_p
  std::vector<int> order;   // devices in stage order
  std::vector<int> layers;  // layer count of each stage, same order
};

// Optimal layer counts for devices in the given order: maximizes X_p (equivalently minimizes
// max(T/S, slowest stage, slowest link)), and among those minimizes T. Infeasible when a device
// cannot hold one layer in its role or the devices cannot hold L layers together. Stages take
// consecutive ranges in order: stage i starts where stage i - 1 ends.
PipelineResult optimizeSplit(const SearchContext& ctx, std::span<const int> order);

// optimizeSplit for models whose layers differ (range_split.cpp): a DP over the range
// boundaries, optimal to a relative 1e-12 of X_p.
PipelineResult optimizeRangeSplit(const SearchContext& ctx, std::span<const int> order);

// Among the splits of result.order with the least total stage time, the one whose slowest stage
// is fastest: layers spread evenly over like devices (identical figures: a pool file, unprofiled
// GPUs on their fallback figures) rather than each filled to its memory in turn. X_p and T_p stay
// the same; a prompt's micro-batches pipelined through the stages (direct forwarding's pipelined
// prefill) wait less for the slowest one. Only exact ties (to rounding): measured devices differ
// by a few percent, and trading total time for balance is a planner decision that would need the
// prefill time in the objective (not modelled yet). A split shaped by a bound (S > 1) is kept.
void balanceSplit(const SearchContext& ctx, PipelineResult& result);
// balanceSplit for models whose layers differ (range_split.cpp).
void balanceRangeSplit(const SearchContext& ctx, PipelineResult& result);

// Scores a split with the cost-model formulas (stage times of the ranges, links, X_p).
void scoreSplit(const SearchContext& ctx, double linkSum, double linkMax, PipelineResult& result);

// Calls visit() with every order of `devices` that the cost model can tell apart: devices of one
// order class (SearchContext::orderClass) in middle positions are interchangeable, so one order
// of them is visited. n! orders at most; for small sets only.
void forEachDistinctOrder(const SearchContext& ctx, std::span<const int> devices,
                          const std::function<void(std::span<const int>)>& visit);

// Orders a set of devices into a pipeline (devices of one node kept together, nodes chained by
// cheapest hops, the embedding and head roles given to devices that suit them) and splits it.
// `thorough` tries many more node orders and role holders (small pools, final polish).
PipelineResult buildPipeline(const SearchContext& ctx, std::span<const int> devices, bool thorough);

// `order` with `device` inserted where it adds the least hop and return time (ties: the
// earliest place after the first device, which keeps the embedding and head roles), split.
// Cheap; for growing pipelines one device at a time.
PipelineResult extendPipeline(const SearchContext& ctx, const std::vector<int>& order, int device);

}  // namespace shoal::plan::detail
