#include "engine/plan/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <utility>

#include "engine/error.h"

namespace shoal::plan {

namespace {

// Layer costs added to running sums: the one summation LayerSums and rangeCost share, so that
// the search and the evaluation of a plan agree bit for bit.
void addLayer(RangeCost& sum, const LayerCost& layer, const Request& request) {
  const double context = static_cast<double>(request.contextTokens);
  const double positions =
      layer.window > 0 ? std::min(context, static_cast<double>(layer.window)) : context;
  sum.residentBytes += layer.weightBytes + positions * static_cast<double>(request.sequences) *
                                               layer.kvBytesPerPosition;
  sum.weightBytes += layer.weightBytes;
  sum.readBytes += layer.readBytesPerToken;
  sum.flops += layer.flopsPerToken;
}

RangeCost difference(const RangeCost& upTo, const RangeCost& before) {
  return {upTo.residentBytes - before.residentBytes, upTo.weightBytes - before.weightBytes,
          upTo.readBytes - before.readBytes, upTo.flops - before.flops};
}

// A per-layer list must cover every layer (validateInputs names the field; this guards direct
// callers of the cost functions).
void checkPerLayer(const ModelCost& model) {
  if (!model.perLayer.empty() && model.perLayer.size() != static_cast<size_t>(model.layers)) {
    throw Error("model costs: " + std::to_string(model.perLayer.size()) +
                " per-layer entries for " + std::to_string(model.layers) + " layers");
  }
}

RangeCost oneUniformLayer(const ModelCost& model, const Request& request) {
  return {perLayerBytes(model, request), model.layerWeightBytes, model.layerWeightBytes,
          model.layerFlopsPerToken};
}

}  // namespace

LayerSums::LayerSums(const ModelCost& model, const Request& request)
    : m_layers(model.layers), m_uniform(model.uniform()) {
  checkPerLayer(model);
  if (m_uniform) {
    m_one = oneUniformLayer(model, request);
    return;
  }
  m_prefix.assign(static_cast<size_t>(m_layers) + 1, RangeCost{});
  for (int l = 0; l < m_layers; ++l) {
    m_prefix[static_cast<size_t>(l) + 1] = m_prefix[static_cast<size_t>(l)];
    addLayer(m_prefix[static_cast<size_t>(l) + 1], model.perLayer[static_cast<size_t>(l)], request);
  }
}

void LayerSums::throwOutside(int first, int count) const {
  throw Error("layer range [" + std::to_string(first) + ", " + std::to_string(first + count) +
              ") is outside the model's " + std::to_string(m_layers) + " layers");
}

RangeCost rangeCost(const ModelCost& model, const Request& request, int first, int count) {
  if (model.uniform() || first < 0 || count < 0 || first > model.layers - count) {
    // The same products (and the same range check) as the table.
    return LayerSums(model, request).range(first, count);
  }
  checkPerLayer(model);
  RangeCost before;
  for (int l = 0; l < first; ++l) addLayer(before, model.perLayer[static_cast<size_t>(l)], request);
  RangeCost upTo = before;
  for (int l = first; l < first + count; ++l)
    addLayer(upTo, model.perLayer[static_cast<size_t>(l)], request);
  return difference(upTo, before);
}

double perLayerBytes(const ModelCost& model, const Request& request) {
  if (!model.uniform()) {
    return rangeCost(model, request, 0, model.layers).residentBytes /
           static_cast<double>(model.layers);
  }
  return model.layerWeightBytes + static_cast<double>(request.contextTokens) *
                                      static_cast<double>(request.sequences) *
                                      model.kvBytesPerTokenPerLayer;
}

double stageMemoryBytes(const ModelCost& model, const Request& request, int firstLayer, int layers,
                        bool hasEmbed, bool hasHead) {
  return stageMemoryBytes(model, rangeCost(model, request, firstLayer, layers), hasEmbed, hasHead);
}

double stageTimeS(const Device& device, const ModelCost& model, int firstLayer, int layers,
                  bool hasHead) {
  // Time does not depend on the KV cache: any request gives the same read bytes and FLOPs.
  return stageTimeS(device, model, rangeCost(model, Request{}, firstLayer, layers), hasHead);
}

double splitMemoryBytes(const ModelCost& model, const Request& request) {
  return stageMemoryBytes(model, request, 0, model.layers, true, false) + model.headBytes;
}

int layerCapacity(const Device& device, const ModelCost& model, const Request& request,
                  bool hasEmbed, bool hasHead) {
  return layerCapacity(device, model, LayerSums(model, request), hasEmbed, hasHead);
}

int layerCapacity(const Device& device, const ModelCost& model, const LayerSums& sums,
                  bool hasEmbed, bool hasHead) {
  const double fixed = embedHeadBytes(model, hasEmbed, hasHead);
  if (fixed > device.memoryBytes) return 0;
  const int layers = model.layers;
  auto fits = [&](int first, int count) {
    return stageMemoryBytes(model, sums.range(first, count), hasEmbed, hasHead) <=
           device.memoryBytes;
  };
  if (!sums.uniform()) {
    int k = 0;
    if (hasHead && !hasEmbed) {  // ranges ending at L
      while (k < layers && fits(layers - k - 1, k + 1)) ++k;
      return k;
    }
    if (hasEmbed) {  // ranges starting at 0
      while (k < layers && fits(0, k + 1)) ++k;
      return k;
    }
    // The longest range anywhere (two pointers: a range that fits still fits without its
    // first layer).
    for (int first = 0, end = 0; first < layers; ++first) {
      end = std::max(end, first);
      while (end < layers && fits(first, end + 1 - first)) ++end;
      k = std::max(k, end - first);
    }
    return k;
  }
  const double per = sums.range(0, 1).residentBytes;
  if (per <= 0) return layers;
  double guess = std::floor((device.memoryBytes - fixed) / per);
  int k = static_cast<int>(std::clamp(guess, 0.0, static_cast<double>(layers)));
  // The division can land one off the exact boundary; settle it with the memory formula itself
  // so that capacity and the memory check never disagree.
  while (k < layers && fits(0, k + 1)) ++k;
  while (k > 0 && !fits(0, k)) --k;
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
    const double t =
        stageTimeS(d, model, s.firstLayer, s.lastLayer - s.firstLayer, i + 1 == stages.size());
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

double prefillTimeS(const Pool& pool, const LinkTable& links, const ModelCost& model,
                    std::span<const StageAssignment> stages, int promptTokens, int chunkTokens) {
  if (stages.empty() || promptTokens <= 0) return 0;
  const double chunk = static_cast<double>(std::min(std::max(chunkTokens, 1), promptTokens));
  const double chunks = std::ceil(static_cast<double>(promptTokens) / chunk);
  double first = 0, slowest = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    const StageAssignment& s = stages[i];
    const Device& d = pool.devices[static_cast<size_t>(s.device)];
    const RangeCost r = rangeCost(model, Request{}, s.firstLayer, s.lastLayer - s.firstLayer);
    double t = std::max(r.readBytes / d.bandwidthBytesPerS, chunk * r.flops / d.flopsPerS);
    if (i + 1 == stages.size()) {
      t += std::max(model.headBytes / d.bandwidthBytesPerS, model.headFlopsPerToken / d.flopsPerS);
    }
    first += t;
    slowest = std::max(slowest, t);
    if (i + 1 < stages.size()) {
      const Link& l =
          links.between(links.nodeOfDevice(s.device), links.nodeOfDevice(stages[i + 1].device));
      const double h = l.latencyS + chunk * model.hiddenBytesPerToken / l.bandwidthBytesPerS;
      first += h;
      slowest = std::max(slowest, h);
    }
  }
  first += returnTimeS(links, links.nodeOfDevice(stages.back().device),
                       links.nodeOfDevice(stages.front().device));
  return first + (chunks - 1) * slowest;
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
      if (s.firstLayer < 0 || s.lastLayer > model.layers) {
        out.push_back(at + ": layers [" + std::to_string(s.firstLayer) + ", " +
                      std::to_string(s.lastLayer) + ") outside the model's " +
                      std::to_string(model.layers));
        continue;
      }
      if (s.lastLayer <= s.firstLayer) continue;
      const double need = stageMemoryBytes(model, request, s.firstLayer, s.lastLayer - s.firstLayer,
                                           i == 0, i + 1 == stages.size());
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
