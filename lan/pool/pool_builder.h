#pragma once
// From what the coordinator knows about its members (node_info replies, measured links) to the
// planner's vocabulary (engine/plan/types.h), and from a plan back to the stages to deploy.
// Pure functions: the unit tests drive them with fake nodes.
//
// Topology: the coordinator relays every hop (star), so a hop from node A to node B is
// A -> coordinator -> B. Its latency is the two one-way latencies (rttA/2 + rttB/2) and its
// bandwidth the smaller of the two; the token return from the last node to the first is
// likewise two coordinator links. Links are therefore measured coordinator <-> node, once per
// node, and combined per pair here.

#include <map>
#include <string>
#include <vector>

#include "engine/plan/types.h"
#include "lan/pool/node_info.h"

namespace shoal::lan {

// What the coordinator measured on its link to one node.
struct NodeLinkProfile {
  std::string nodeId;             // NodeInfo::deviceId
  double rttS = 0;                // median ping round trip
  double bandwidthBytesPerS = 0;  // bandwidth_probe; 0 when not measured
};

// Device and node figures the planner needs when a node did not report them (not profiled):
// conservative desktop-CPU numbers, so an unprofiled node is planned as a slow one rather than
// refused (the planner requires B, P > 0).
inline constexpr double kFallbackBandwidthBytesPerS = 2e10;  // dual-channel DDR4
inline constexpr double kFallbackFlopsPerS = 1e11;
// A LAN link that was not measured: 1 ms round trip, 100 Mbit/s.
inline constexpr double kFallbackRttS = 1e-3;
inline constexpr double kFallbackLinkBandwidth = 1.25e7;

// The planner's id for a device: "<node device id>/<backend device id>" (unique in the pool).
std::string planDeviceId(const std::string& nodeId, const std::string& deviceId);
// Splits a plan device id back; throws shoal::Error when it has no '/'.
std::pair<std::string, std::string> splitPlanDeviceId(const std::string& planId);

// Round trips two nodes measured between each other (a link's hello answered, node_client.h's
// linkConnect), by node pair: the key is the two NodeInfo::deviceIds in ascending order.
using NodePairRtts = std::map<std::pair<std::string, std::string>, double>;
std::pair<std::string, std::string> nodePair(const std::string& a, const std::string& b);

// The pool the planner sees: one plan::Device per node device (memory = free memory when the
// node reported it, else total), plan::Node = the node's device ID, and one link per node pair:
// its latency half the round trip the two nodes measured where `pairRtts` has it, else half of
// each one's round trip to the coordinator added (which takes the coordinator to be wired: a
// coordinator on Wi-Fi makes every pair look as slow as its own link); its bandwidth the lesser
// of the two coordinator links'. Nodes without devices contribute nothing.
plan::Pool buildPool(const std::vector<NodeInfo>& nodes, const std::vector<NodeLinkProfile>& links,
                     const NodePairRtts& pairRtts = {});

// One stage to deploy, as the node protocol's load_stage describes it.
struct StagePlacement {
  std::string nodeId;    // NodeInfo::deviceId
  std::string deviceId;  // backend device on the node
  int firstLayer = 0;    // [firstLayer, lastLayer)
  int lastLayer = 0;
  bool hasEmbedding = false;
  bool hasHead = false;

  bool operator==(const StagePlacement&) const = default;
};

// A pipeline of a feasible plan as stages, by default the fastest (plan::plan orders them
// fastest first). Throws shoal::Error when the plan is infeasible (with its reason) or has no
// such pipeline.
std::vector<StagePlacement> pipelineStages(const plan::Plan& plan, size_t pipeline = 0);

// A one-pipeline plan::Plan for stages (device ids as planDeviceId), so that replan() can
// compare what is deployed now with the candidates.
plan::Plan planOfStages(const std::vector<StagePlacement>& stages, const plan::Pool& pool);

}  // namespace shoal::lan
