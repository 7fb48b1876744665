#include "engine/plan/routing.h"

#include <algorithm>
#include <limits>
#include <map>

#include "engine/plan/cost_model.h"

namespace shoal::plan {

std::vector<RoutableStage> routableStages(const Plan& plan, const Request& request) {
  std::vector<RoutableStage> out;
  for (const Pipeline& p : plan.pipelines) {
    for (const StageAssignment& s : p.stages) {
      RoutableStage r;
      r.device = s.device;
      r.firstLayer = s.firstLayer;
      r.lastLayer = s.lastLayer;
      r.secondsPerToken = s.stageS;
      r.queueDepth = 0;
      r.kvSlots = static_cast<int>(std::max<int64_t>(1, request.sequences));
      out.push_back(r);
    }
  }
  return out;
}

Route route(const Pool& pool, const ModelCost& model, std::span<const RoutableStage> stages) {
  const LinkTable links(pool);
  const double inf = std::numeric_limits<double>::infinity();
  const size_t n = stages.size();

  // A stage takes part when it is well formed and has room for one more sequence.
  std::vector<double> cost(n, inf);
  std::map<int, std::vector<size_t>> startingAt;  // first layer → stages, in index order
  for (size_t i = 0; i < n; ++i) {
    const RoutableStage& s = stages[i];
    const bool valid = s.device >= 0 && static_cast<size_t>(s.device) < pool.devices.size() &&
                       s.firstLayer >= 0 && s.lastLayer > s.firstLayer &&
                       s.lastLayer <= model.layers && s.secondsPerToken >= 0 && s.kvSlots > 0;
    if (!valid || s.queueDepth >= s.kvSlots) continue;
    cost[i] =
        s.secondsPerToken * (1.0 + static_cast<double>(std::max(0, s.queueDepth)) / s.kvSlots);
    startingAt[s.firstLayer].push_back(i);
  }
  auto hop = [&](size_t a, size_t b) {
    return hopTimeS(links, model, links.nodeOfDevice(stages[a].device),
                    links.nodeOfDevice(stages[b].device));
  };

  Route best;
  double bestCost = inf;
  auto sourcesIt = startingAt.find(0);
  if (sourcesIt == startingAt.end()) return best;
  std::vector<double> dist(n);
  std::vector<size_t> prev(n);
  for (size_t source : sourcesIt->second) {
    // Shortest path from this source; every edge goes to a larger first layer, so relaxing the
    // stages in order of first layer settles each one before it is extended.
    std::fill(dist.begin(), dist.end(), inf);
    dist[source] = cost[source];
    prev[source] = source;
    for (const auto& [first, group] : startingAt) {
      for (size_t v : group) {
        if (dist[v] == inf) continue;
        auto next = startingAt.find(stages[v].lastLayer);
        if (next == startingAt.end()) continue;
        for (size_t w : next->second) {
          const double d = dist[v] + hop(v, w) + cost[w];
          if (d < dist[w]) {
            dist[w] = d;
            prev[w] = v;
          }
        }
      }
    }
    for (size_t sink = 0; sink < n; ++sink) {
      if (dist[sink] == inf || stages[sink].lastLayer != model.layers) continue;
      const double total = dist[sink] + returnTimeS(links, links.nodeOfDevice(stages[sink].device),
                                                    links.nodeOfDevice(stages[source].device));
      if (total < bestCost) {
        bestCost = total;
        best.stages.clear();
        for (size_t v = sink;; v = prev[v]) {
          best.stages.push_back(v);
          if (v == source) break;
        }
        std::reverse(best.stages.begin(), best.stages.end());
      }
    }
  }
  best.found = bestCost < inf;
  best.expectedLatencyS = best.found ? bestCost : 0;
  return best;
}

int chooseReplica(const Pool& pool, const ModelCost& model,
                  std::span<const std::vector<RoutableStage>> replicas) {
  const LinkTable links(pool);
  const double inf = std::numeric_limits<double>::infinity();
  int best = -1;
  bool bestFull = true;
  double bestCost = inf;
  for (size_t r = 0; r < replicas.size(); ++r) {
    const std::vector<RoutableStage>& stages = replicas[r];
    if (stages.empty()) continue;
    bool wellFormed = stages.front().firstLayer == 0 && stages.back().lastLayer == model.layers;
    bool full = false;
    double cost = 0;
    for (size_t i = 0; i < stages.size() && wellFormed; ++i) {
      const RoutableStage& s = stages[i];
      wellFormed = s.device >= 0 && static_cast<size_t>(s.device) < pool.devices.size() &&
                   s.lastLayer > s.firstLayer && s.secondsPerToken >= 0 && s.kvSlots > 0 &&
                   (i == 0 || s.firstLayer == stages[i - 1].lastLayer);
      if (!wellFormed) break;
      const int depth = std::max(0, s.queueDepth);
      full = full || depth >= s.kvSlots;
      cost += s.secondsPerToken * (1.0 + static_cast<double>(depth) / s.kvSlots);
      if (i > 0) {
        cost += hopTimeS(links, model, links.nodeOfDevice(stages[i - 1].device),
                         links.nodeOfDevice(s.device));
      }
    }
    if (!wellFormed) continue;
    cost += returnTimeS(links, links.nodeOfDevice(stages.back().device),
                        links.nodeOfDevice(stages.front().device));
    // A replica with room beats any full one; among equals the cheaper one wins.
    if (best < 0 || (bestFull && !full) || (full == bestFull && cost < bestCost)) {
      best = static_cast<int>(r);
      bestFull = full;
      bestCost = cost;
    }
  }
  return best;
}

}  // namespace shoal::plan
