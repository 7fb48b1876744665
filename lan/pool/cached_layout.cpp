#include "lan/pool/cached_layout.h"

#include <map>
#include <set>
#include <utility>

#include "engine/plan/cost_model.h"
#include "lan/pool/pool_builder.h"

namespace shoal::lan {
namespace {

using Range = std::pair<int, int>;  // [first, last)

// Per node id: whether it has the model file, and the ranges of it cached there.
struct Holdings {
  bool file = false;
  std::set<Range> cached;
};

std::map<std::string, Holdings> holdingsOf(const std::vector<NodeInfo>& nodes,
                                           const std::string& modelSha) {
  std::map<std::string, Holdings> out;
  for (const NodeInfo& n : nodes) {
    Holdings& h = out[n.deviceId];
    h.file = n.hasModel(modelSha);
    for (const CachedShard& s : n.shards) {
      if (s.model == modelSha) h.cached.insert({s.firstLayer, s.lastLayer});
    }
  }
  return out;
}

// The chains of cached ranges from layer `at` to the last, depth first, each one evaluated by
// `done` (at most `budget` of them).
struct ChainSearch {
  ChainSearch(const plan::Pool& p, const std::map<std::string, Holdings>& h, int l)
      : pool(p), holdings(h), layers(l), used(p.devices.size(), 0) {}

  const plan::Pool& pool;
  const std::map<std::string, Holdings>& holdings;
  int layers = 0;
  int budget = 100000;
  std::vector<plan::StageAssignment> chain;
  std::vector<char> used;  // per device: in the chain

  template <typename Done>
  void from(int at, Done&& done) {
    if (budget <= 0) return;
    if (at == layers) {
      --budget;
      done(chain);
      return;
    }
    for (size_t d = 0; d < pool.devices.size(); ++d) {
      if (used[d]) continue;
      const auto h = holdings.find(pool.devices[d].node);
      if (h == holdings.end()) continue;
      for (auto it = h->second.cached.lower_bound({at, at}); it != h->second.cached.end(); ++it) {
        if (it->first != at) break;
        plan::StageAssignment s;
        s.device = static_cast<int>(d);
        s.deviceId = pool.devices[d].id;
        s.firstLayer = it->first;
        s.lastLayer = it->second;
        used[d] = 1;
        chain.push_back(std::move(s));
        from(it->second, done);
        chain.pop_back();
        used[d] = 0;
      }
    }
  }
};

}  // namespace

double streamedBytes(const plan::Plan& plan, const plan::ModelCost& model,
                     const plan::Request& request, const std::vector<NodeInfo>& nodes,
                     const std::string& modelSha) {
  if (plan.pipelines.empty()) return 0;
  const auto holdings = holdingsOf(nodes, modelSha);
  const plan::LayerSums sums(model, request);
  double bytes = 0;
  for (const plan::StageAssignment& s : plan.pipelines.front().stages) {
    const std::string node = splitPlanDeviceId(s.deviceId).first;
    const auto h = holdings.find(node);
    if (h != holdings.end() &&
        (h->second.file || h->second.cached.count({s.firstLayer, s.lastLayer}) > 0)) {
      continue;
    }
    bytes += sums.range(s.firstLayer, s.lastLayer - s.firstLayer).weightBytes;
    if (s.firstLayer == 0) bytes += model.embedBytes;
    if (s.lastLayer == model.layers) bytes += model.headBytes;
  }
  return bytes;
}

plan::Plan preferCachedShards(const plan::Plan& best, const plan::Pool& pool,
                              const plan::ModelCost& model, const plan::Request& request,
                              const std::vector<NodeInfo>& nodes, const std::string& modelSha,
                              double tolerance) {
  if (!best.feasible || best.pipelines.empty() ||
      streamedBytes(best, model, request, nodes, modelSha) <= 0) {
    return best;
  }
  const auto holdings = holdingsOf(nodes, modelSha);
  ChainSearch search(pool, holdings, model.layers);
  plan::Plan chosen = best;
  double chosenX = -1;
  search.from(0, [&](const std::vector<plan::StageAssignment>& stages) {
    plan::Plan p;
    p.feasible = true;
    p.pipelines.emplace_back();
    p.pipelines.front().stages = stages;
    if (!plan::planViolations(pool, model, request, p).empty()) return;
    plan::evaluatePlan(pool, model, request, p);
    if (p.throughputTokS < (1 - tolerance) * best.throughputTokS || p.throughputTokS <= chosenX) {
      return;
    }
    for (size_t d = 0; d < pool.devices.size(); ++d) {
      if (!search.used[d]) p.unusedDevices.push_back(pool.devices[d].id);
    }
    chosenX = p.throughputTokS;
    chosen = std::move(p);
  });
  return chosen;
}

}  // namespace shoal::lan
