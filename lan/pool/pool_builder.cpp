#include "lan/pool/pool_builder.h"

#include <algorithm>
#include <map>

#include "engine/error.h"

namespace shoal::lan {

std::string planDeviceId(const std::string& nodeId, const std::string& deviceId) {
  return nodeId + "/" + deviceId;
}

std::pair<std::string, std::string> splitPlanDeviceId(const std::string& planId) {
  // Node ids are base32 groups with '-', never '/', so the first '/' separates.
  const size_t slash = planId.find('/');
  if (slash == std::string::npos) throw Error("plan device id '" + planId + "' has no node part");
  return {planId.substr(0, slash), planId.substr(slash + 1)};
}

std::pair<std::string, std::string> nodePair(const std::string& a, const std::string& b) {
  return a < b ? std::pair(a, b) : std::pair(b, a);
}

plan::Pool buildPool(const std::vector<NodeInfo>& nodes, const std::vector<NodeLinkProfile>& links,
                     const NodePairRtts& pairRtts) {
  plan::Pool pool;
  std::map<std::string, NodeLinkProfile> byNode;
  for (const NodeLinkProfile& l : links) byNode[l.nodeId] = l;

  std::vector<std::string> nodeIds;
  for (const NodeInfo& n : nodes) {
    if (n.devices.empty()) continue;
    if (std::find(nodeIds.begin(), nodeIds.end(), n.deviceId) != nodeIds.end()) {
      throw Error("node " + n.deviceId + " (" + n.name + ") is in the pool twice");
    }
    nodeIds.push_back(n.deviceId);
    for (const NodeDevice& d : n.devices) {
      plan::Device dev;
      dev.id = planDeviceId(n.deviceId, d.id);
      dev.node = n.deviceId;
      dev.memoryBytes = static_cast<double>(d.memoryFree > 0 ? d.memoryFree : d.memoryTotal);
      dev.bandwidthBytesPerS =
          d.bandwidthBytesPerS > 0 ? d.bandwidthBytesPerS : kFallbackBandwidthBytesPerS;
      dev.flopsPerS = d.flopsPerS > 0 ? d.flopsPerS : kFallbackFlopsPerS;
      pool.devices.push_back(std::move(dev));
    }
  }

  auto profileOf = [&](const std::string& node) {
    NodeLinkProfile p;
    p.nodeId = node;
    p.rttS = kFallbackRttS;
    p.bandwidthBytesPerS = kFallbackLinkBandwidth;
    if (const auto it = byNode.find(node); it != byNode.end()) {
      if (it->second.rttS > 0) p.rttS = it->second.rttS;
      if (it->second.bandwidthBytesPerS > 0) p.bandwidthBytesPerS = it->second.bandwidthBytesPerS;
    }
    return p;
  };
  for (size_t a = 0; a < nodeIds.size(); ++a) {
    for (size_t b = a + 1; b < nodeIds.size(); ++b) {
      const NodeLinkProfile pa = profileOf(nodeIds[a]), pb = profileOf(nodeIds[b]);
      plan::NodeLink link;
      link.nodeA = nodeIds[a];
      link.nodeB = nodeIds[b];
      const auto measured = pairRtts.find(nodePair(nodeIds[a], nodeIds[b]));
      link.link.latencyS = measured != pairRtts.end() && measured->second > 0
                               ? measured->second / 2
                               : pa.rttS / 2 + pb.rttS / 2;
      link.link.bandwidthBytesPerS = std::min(pa.bandwidthBytesPerS, pb.bandwidthBytesPerS);
      pool.links.push_back(std::move(link));
    }
  }
  return pool;
}

std::vector<StagePlacement> pipelineStages(const plan::Plan& plan, size_t pipeline) {
  if (!plan.feasible || plan.pipelines.empty()) {
    throw Error("no plan for the pool: " + (plan.infeasibleReason.empty()
                                                ? std::string("no pipeline")
                                                : plan.infeasibleReason));
  }
  if (pipeline >= plan.pipelines.size()) {
    throw Error("the plan has no pipeline " + std::to_string(pipeline + 1));
  }
  const plan::Pipeline& best = plan.pipelines[pipeline];
  std::vector<StagePlacement> stages;
  for (size_t i = 0; i < best.stages.size(); ++i) {
    const plan::StageAssignment& s = best.stages[i];
    auto [node, device] = splitPlanDeviceId(s.deviceId);
    StagePlacement p;
    p.nodeId = std::move(node);
    p.deviceId = std::move(device);
    p.firstLayer = s.firstLayer;
    p.lastLayer = s.lastLayer;
    p.hasEmbedding = i == 0;
    p.hasHead = i + 1 == best.stages.size();
    stages.push_back(std::move(p));
  }
  return stages;
}

plan::Plan planOfStages(const std::vector<StagePlacement>& stages, const plan::Pool& pool) {
  plan::Plan p;
  p.feasible = !stages.empty();
  plan::Pipeline pipe;
  for (const StagePlacement& s : stages) {
    plan::StageAssignment a;
    a.deviceId = planDeviceId(s.nodeId, s.deviceId);
    for (size_t d = 0; d < pool.devices.size(); ++d) {
      if (pool.devices[d].id == a.deviceId) a.device = static_cast<int>(d);
    }
    a.firstLayer = s.firstLayer;
    a.lastLayer = s.lastLayer;
    pipe.stages.push_back(std::move(a));
  }
  p.pipelines.push_back(std::move(pipe));
  return p;
}

}  // namespace shoal::lan
