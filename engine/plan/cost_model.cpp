#include "engine/plan/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <utility>

#include "engine/error.h"

namespace shoal::plan {

double perLayerBytes(const ModelCost& model, const Request& request) {
  return model.layerWeightBytes + static_cast<double>(request.contextTokens) *
                                      static_cast<double>(request.sequences) *
                                      model.kvBytesPerTokenPerLayer;
}

double stageMemoryBytes(const ModelCost& model, const Request& request, int layers, bool hasEmbed,
                        bool hasHead) {
  return static_cast<double>(layers) * perLayerBytes(model, request) +
         (hasEmbed ? model.embedBytes : 0.0) + (hasHead ? model.headBytes : 0.0);
}

double stageTimeS(const Device& device, const ModelCost& model, int layers, bool hasHead) {
  const double k = static_cast<double>(layers);
  const double bytes = k * model.layerWeightBytes + (hasHead ? model.headBytes : 0.0);
  const double flops = k * model.layerFlopsPerToken + (hasHead ? model.headFlopsPerToken : 0.0);
  return std::max(bytes / device.bandwidthBytesPerS, flops / device.flopsPerS);
}

int layerCapacity(const Device& device, const ModelCost& model, const Request& request,
                  bool hasEmbed, bool hasHead) {
  const double fixed = (hasEmbed ? model.embedBytes : 0.0) + (hasHead ? model.headBytes : 0.0);
  if (fixed > device.memoryBytes) return 0;
  const double per = perLayerBytes(model, request);
  if (per <= 0) return model.layers;
  double guess = std::floor((device.memoryBytes - fixed) / per);
  int k = static_cast<int>(std::clamp(guess, 0.0, static_cast<double>(model.layers)));
  // The division can land one off the exact boundary; settle it with the memory formula itself
  // so that capacity and the memory check never disagree.
  while (k < model.layers &&
         stageMemoryBytes(model, request, k + 1, hasEmbed, hasHead) <= device.memoryBytes) {
    ++k;
  }
  while (k > 0 && stageMemoryBytes(model, request, k, hasEmbed, hasHead) > device.memoryBytes) {
    --k;
  }
  return k;
}

LinkTable::LinkTable(const Pool& pool) {
  std::map<std::string, int> index;
  for (const Device& d : pool.devices) {
    auto [it, inserted] = index.emplace(d.node, static_cast<int>(m_nodeNames.size()));
    if (inserted) m_nodeNames.push_back(d.node);
    m_deviceNode.push_back(it->second);
  }
  const size_t n = m_nodeNames.size();
  std::vector<char> known(n * n, 0);
  m_links.assign(n * n, pool.defaultLink.value_or(Link{}));
  for (size_t i = 0; i < n; ++i) {
    m_links[i * n + i] = pool.intraNode;
    known[i * n + i] = 1;
  }
  for (const NodeLink& nl : pool.links) {
    auto a = index.find(nl.nodeA);
    auto b = index.find(nl.nodeB);
    if (a == index.end() || b == index.end()) continue;  // a node without devices: unused
    const size_t ia = static_cast<size_t>(a->second);
    const size_t ib = static_cast<size_t>(b->second);
    m_links[ia * n + ib] = nl.link;
    m_links[ib * n + ia] = nl.link;
    known[ia * n + ib] = known[ib * n + ia] = 1;
  }
  if (!pool.defaultLink) {
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = i + 1; j < n; ++j) {
        if (!known[i * n + j]) {
          throw Error("pool links: no link between nodes '" + m_nodeNames[i] + "' and '" +
                      m_nodeNames[j] + "' and no default_link");
        }
      }
    }
  }
}

const Link& LinkTable::between(int nodeA, int nodeB) const {
  return m_links[static_cast<size_t>(nodeA) * m_nodeNames.size() + static_cast<size_t>(nodeB)];
}

double hopTimeS(const LinkTable& links, const ModelCost& model, int nodeA, int nodeB) {
  const Link& l = links.between(nodeA, nodeB);
  return l.latencyS + model.hiddenBytesPerToken / l.bandwidthBytesPerS;
}

double returnTimeS(const LinkTable& links, int lastNode, int firstNode) {
  return lastNode == firstNode ? 0.0 : links.between(lastNode, firstNode).latencyS;
}

double pipelineThroughput(double sequences, double latencyS, double slowestStepS) {
  if (latencyS <= 0) return 0;
  const double bySequences = sequences / latencyS;
  if (slowestStepS <= 0) return bySequences;
  return std::min(bySequences, 1.0 / slowestStepS);
}

PipelineMetrics evaluatePipeline(const Pool& pool, const LinkTable& links, const ModelCost& model,
                                 const Request& request, std::span<const StageAssignment> stages) {
  PipelineMetrics m;
  if (stages.empty()) return m;
  double slowest = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    const StageAssignment& s = stages[i];
    const Device& d = pool.devices[static_cast<size_t>(s.device)];
    const double t = stageTimeS(d, model, s.lastLayer - s.firstLayer, i + 1 == stages.size());
    m.stageS.push_back(t);
    m.latencyS += t;
    slowest = std::max(slowest, t);
  }
  for (size_t i = 0; i + 1 < stages.size(); ++i) {
    const double h = hopTimeS(links, model, links.nodeOfDevice(stages[i].device),
                              links.nodeOfDevice(stages[i + 1].device));
    m.linkS.push_back(h);
    m.latencyS += h;
    slowest = std::max(slowest, h);
  }
  const double r = returnTimeS(links, links.nodeOfDevice(stages.back().device),
                               links.nodeOfDevice(stages.front().device));
  m.linkS.push_back(r);
  m.latencyS += r;
  slowest = std::max(slowest, r);
  m.throughputTokS =
      pipelineThroughput(static_cast<double>(request.sequences), m.latencyS, slowest);
  return m;
}

void evaluatePlan(const Pool& pool, const ModelCost& model, const Request& request, Plan& plan) {
  evaluatePlan(pool, LinkTable(pool), model, request, plan);
}

void evaluatePlan(const Pool& pool, const LinkTable& links, const ModelCost& model,
                  const Request& request, Plan& plan) {
  plan.throughputTokS = 0;
  for (Pipeline& p : plan.pipelines) {
    PipelineMetrics m = evaluatePipeline(pool, links, model, request, p.stages);
    for (size_t i = 0; i < p.stages.size(); ++i) p.stages[i].stageS = m.stageS[i];
    p.latencyS = m.latencyS;
    p.throughputTokS = m.throughputTokS;
    plan.throughputTokS += m.throughputTokS;
  }
}

std::vector<std::string> planViolations(const Pool& pool, const ModelCost& model,
                                        const Request& request, const Plan& plan) {
  std::vector<std::string> out;
  std::set<int> used;
  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    const auto& stages = plan.pipelines[p].stages;
    const std::string where = "pipeline " + std::to_string(p);
    if (stages.empty()) {
      out.push_back(where + ": no stages");
      continue;
    }
    int expectFirst = 0;
    for (size_t i = 0; i < stages.size(); ++i) {
      const StageAssignment& s = stages[i];
      const std::string at = where + " stage " + std::to_string(i);
      if (s.device < 0 || static_cast<size_t>(s.device) >= pool.devices.size()) {
        out.push_back(at + ": unknown device index " + std::to_string(s.device));
        continue;
      }
      const Device& d = pool.devices[static_cast<size_t>(s.device)];
      if (!s.deviceId.empty() && s.deviceId != d.id) {
        out.push_back(at + ": device id '" + s.deviceId + "' does not match index " +
                      std::to_string(s.device) + " ('" + d.id + "')");
      }
      if (!used.insert(s.device).second) out.push_back(at + ": device '" + d.id + "' used twice");
      if (s.firstLayer != expectFirst) {
        out.push_back(at + ": starts at layer " + std::to_string(s.firstLayer) + ", expected " +
                      std::to_string(expectFirst));
      }
      if (s.lastLayer <= s.firstLayer) out.push_back(at + ": empty layer range");
      expectFirst = s.lastLayer;
      const double need = stageMemoryBytes(model, request, s.lastLayer - s.firstLayer, i == 0,
                                           i + 1 == stages.size());
      if (need > d.memoryBytes) {
        char buf[160];
        std::snprintf(buf, sizeof buf, ": needs %.0f bytes, device '%s' has %.0f", need,
                      d.id.c_str(), d.memoryBytes);
        out.push_back(at + buf);
      }
    }
    if (expectFirst != model.layers) {
      out.push_back(where + ": ends at layer " + std::to_string(expectFirst) + ", expected " +
                    std::to_string(model.layers));
    }
  }
  return out;
}

}  // namespace shoal::plan
