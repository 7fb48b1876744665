#include "bench/plan_sim/parallax_allocator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <vector>

#include "bench/plan_sim/baselines.h"
#include "engine/plan/cost_model.h"

namespace shoal::plan_sim {
namespace {

constexpr int kInf = std::numeric_limits<int>::max() / 4;

struct Node {
  int device;
  int cap;       // get_decoder_layer_capacity()
  int capStart;  // include_input_embed=True
  int capClose;  // include_lm_head=True
  int capBoth;   // both
  double flops;
};

struct OverBudget {};

// DynamicProgrammingLayerAllocator.allocate_from_standby for one target pipeline count k.
class PipelineDp {
 public:
  PipelineDp(const std::vector<Node>& nodes, int layers, int k, size_t budget, size_t& states)
      : m_nodes(nodes), m_layers(layers), m_k(k), m_budget(budget), m_states(states) {
    m_suffix.assign(nodes.size() + 1, 0);
    for (size_t i = nodes.size(); i-- > 0;) m_suffix[i] = m_suffix[i + 1] + nodes[i].cap;
  }

  int solve() { return dp(0, {}, 0); }

  // _backtrack: the pipelines (node positions) the recorded best actions build.
  std::vector<std::vector<int>> backtrack() const {
    std::vector<std::vector<int>> pipelines(static_cast<size_t>(m_k));
    std::vector<std::pair<int, std::vector<int>>> open;
    int finished = 0;
    const int n = static_cast<int>(m_nodes.size());
    for (int i = 0; i < n && finished < m_k;) {
      std::vector<int> residuals;
      for (const auto& o : open) residuals.push_back(o.first);
      std::sort(residuals.begin(), residuals.end());
      auto it = m_path.find(key(i, residuals, finished));
      if (it == m_path.end()) break;
      const Action& a = it->second;
      const Node& node = m_nodes[static_cast<size_t>(i)];
      if (a.kind == Action::Assign) {
        std::stable_sort(open.begin(), open.end(),
                         [](const auto& x, const auto& y) { return x.first < y.first; });
        auto& [rj, seq] = open[static_cast<size_t>(a.index)];
        int after = rj - node.cap;
        if (after <= 0) after = rj - node.capClose;
        seq.push_back(i);
        if (after <= 0 || a.closed) {
          auto& dst = pipelines[static_cast<size_t>(finished)];
          dst.insert(dst.end(), seq.begin(), seq.end());
          open.erase(open.begin() + a.index);
          ++finished;
        } else {
          rj = after;
        }
      } else if (a.kind == Action::Start) {
        if (a.closed) {
          pipelines[static_cast<size_t>(finished++)].push_back(i);
        } else {
          open.push_back({a.index, {i}});
        }
      }
      ++i;
    }
    return pipelines;
  }

 private:
  struct Action {
    enum Kind { Skip, Assign, Start, Done } kind = Skip;
    int index = 0;  // Assign: open pipeline; Start: residual of the new one
    bool closed = false;
  };

  static std::vector<int> key(int i, const std::vector<int>& open, int finished) {
    std::vector<int> k{i, finished};
    k.insert(k.end(), open.begin(), open.end());
    return k;
  }

  int dp(int i, const std::vector<int>& open, int finished) {
    const std::vector<int> k = key(i, open, finished);
    if (auto it = m_memo.find(k); it != m_memo.end()) return it->second;
    if (++m_states > m_budget) throw OverBudget{};
    const int result = compute(i, open, finished, k);
    m_memo.emplace(k, result);
    return result;
  }

  int compute(int i, const std::vector<int>& open, int finished, const std::vector<int>& k) {
    if (finished == m_k && open.empty()) {
      m_path[k] = {Action::Done, 0, false};
      return 0;
    }
    const int n = static_cast<int>(m_nodes.size());
    if (i == n) return kInf;
    const int newNeeded = m_k - finished - static_cast<int>(open.size());
    const long needOpen = std::accumulate(open.begin(), open.end(), 0L);
    if (newNeeded < 0 ||
        m_suffix[static_cast<size_t>(i)] < needOpen + std::max(0, newNeeded) * long{m_layers} ||
        finished + static_cast<int>(open.size()) + (n - i) < m_k) {
      return kInf;
    }
    const Node& node = m_nodes[static_cast<size_t>(i)];
    int best = dp(i + 1, open, finished);
    Action action{Action::Skip, 0, false};
    auto consider = [&](int cost, Action a) {
      if (cost < kInf && cost + 1 < best) {
        best = cost + 1;
        action = a;
      }
    };
    for (size_t j = 0; j < open.size(); ++j) {
      std::vector<int> next = open;
      const int after = open[j] - node.cap;
      if (after <= 0) {
        const int afterClose = open[j] - node.capClose;
        if (afterClose <= 0) {
          next.erase(next.begin() + static_cast<std::ptrdiff_t>(j));
          consider(dp(i + 1, next, finished + 1), {Action::Assign, static_cast<int>(j), true});
        } else {
          next[j] = afterClose;
          std::sort(next.begin(), next.end());
          consider(dp(i + 1, next, finished), {Action::Assign, static_cast<int>(j), false});
        }
      } else {
        next[j] = after;
        std::sort(next.begin(), next.end());
        consider(dp(i + 1, next, finished), {Action::Assign, static_cast<int>(j), false});
      }
    }
    if (newNeeded > 0) {
      const int fresh = m_layers - node.capStart;
      if (fresh <= 0) {
        consider(dp(i + 1, open, finished + 1), {Action::Start, 0, true});
      } else {
        std::vector<int> next = open;
        next.push_back(fresh);
        std::sort(next.begin(), next.end());
        consider(dp(i + 1, next, finished), {Action::Start, fresh, false});
      }
    }
    m_path[k] = action;
    return best;
  }

  const std::vector<Node>& m_nodes;
  int m_layers, m_k;
  size_t m_budget;
  size_t& m_states;
  std::vector<long> m_suffix;
  std::map<std::vector<int>, int> m_memo;
  std::map<std::vector<int>, Action> m_path;
};

// adjust_pipeline_layers: water-filling by FLOPS over the capacity-sorted nodes. nullopt when
// Parallax raises (a node without capacity, too little capacity, layers left over).
std::optional<std::vector<std::pair<int, int>>> waterFill(std::vector<Node> nodes, int layers) {
  std::stable_sort(nodes.begin(), nodes.end(),
                   [](const Node& a, const Node& b) { return a.cap > b.cap; });
  const size_t n = nodes.size();
  std::vector<int> caps(n);
  for (size_t i = 0; i < n; ++i) {
    caps[i] = i == 0 ? nodes[i].capStart : (i == n - 1 ? nodes[i].capClose : nodes[i].cap);
    if (caps[i] <= 0) return std::nullopt;
  }
  if (std::accumulate(caps.begin(), caps.end(), 0L) < layers) return std::nullopt;
  auto totalAt = [&](double lambda) {
    double t = 0;
    for (size_t i = 0; i < n; ++i) t += std::min<double>(caps[i], lambda * nodes[i].flops);
    return t;
  };
  double lo = 0, hi = 0;
  for (size_t i = 0; i < n; ++i) hi = std::max(hi, caps[i] / nodes[i].flops);
  for (int iter = 0; iter < 40; ++iter) {
    const double mid = 0.5 * (lo + hi);
    if (totalAt(mid) >= layers)
      hi = mid;
    else
      lo = mid;
  }
  std::vector<double> target(n);
  std::vector<int> counts(n);
  int assigned = 0;
  for (size_t i = 0; i < n; ++i) {
    target[i] = std::min<double>(caps[i], hi * nodes[i].flops);
    counts[i] = std::min(caps[i], static_cast<int>(std::floor(target[i])));
    assigned += counts[i];
  }
  int remaining = layers - assigned;
  if (remaining < 0) return std::nullopt;
  std::vector<size_t> byFraction(n);
  std::iota(byFraction.begin(), byFraction.end(), 0);
  // Python: sorted(((frac, -i)), reverse=True): larger fraction first, then lower index.
  std::stable_sort(byFraction.begin(), byFraction.end(), [&](size_t a, size_t b) {
    return target[a] - counts[a] > target[b] - counts[b];
  });
  for (size_t i : byFraction) {
    if (remaining == 0) break;
    if (caps[i] - counts[i] > 0) {
      ++counts[i];
      --remaining;
    }
  }
  if (remaining != 0) return std::nullopt;
  std::vector<std::pair<int, int>> stages;
  for (size_t i = 0; i < n; ++i) stages.push_back({nodes[i].device, counts[i]});
  return stages;
}

// GreedyLayerAllocator.allocate_from_standby (look-ahead on, water-filling rebalance).
std::vector<std::vector<Node>> greedyPipelines(std::vector<Node> available, int layers) {
  std::vector<std::vector<Node>> out;
  while (!available.empty()) {
    long total = 0;
    for (const Node& n : available) total += n.cap;
    if (total < layers) break;
    std::vector<Node> pipeline;
    long remaining = layers, current = total;
    while (remaining > 0 && !available.empty()) {
      const bool start = pipeline.empty();
      const bool lookAhead = start && current - remaining >= layers + 1;
      std::ptrdiff_t bestFit = -1;
      if (lookAhead) {
        for (size_t i = 0; i < available.size(); ++i) {
          const int capClose = available[i].capClose;
          if (capClose >= remaining && current - capClose >= layers)
            bestFit = static_cast<std::ptrdiff_t>(i);
        }
      }
      const std::ptrdiff_t at = bestFit >= 0 ? bestFit : 0;
      const Node node = available[static_cast<size_t>(at)];
      available.erase(available.begin() + at);
      pipeline.push_back(node);
      int capacity = start ? node.capStart : node.cap;
      remaining -= capacity;
      if (remaining <= 0) {
        remaining += capacity;
        capacity = start ? node.capBoth : node.capClose;
        remaining -= capacity;
      }
      current -= capacity;
    }
    if (remaining <= 0 && !pipeline.empty()) {
      out.push_back(std::move(pipeline));
    } else {
      break;
    }
  }
  return out;
}

}  // namespace

plan::Plan parallaxPlan(const plan::Pool& pool, const plan::ModelCost& model,
                        const plan::Request& request, ParallaxStats* stats, size_t dpStateBudget) {
  std::vector<Node> nodes;
  for (size_t d = 0; d < pool.devices.size(); ++d) {
    const plan::Device& dev = pool.devices[d];
    nodes.push_back({static_cast<int>(d), plan::layerCapacity(dev, model, request, false, false),
                     plan::layerCapacity(dev, model, request, true, false),
                     plan::layerCapacity(dev, model, request, false, true),
                     plan::layerCapacity(dev, model, request, true, true), dev.flopsPerS});
  }
  std::stable_sort(nodes.begin(), nodes.end(),
                   [](const Node& a, const Node& b) { return a.cap > b.cap; });
  const int layers = model.layers;
  long totalCap = 0;
  for (const Node& n : nodes) totalCap += n.cap;

  ParallaxStats local;
  ParallaxStats& st = stats ? *stats : local;
  st = ParallaxStats{};
  std::vector<std::vector<Node>> pipelines;
  if (totalCap >= layers) {
    try {
      const int maxPipes =
          static_cast<int>(std::min<long>(static_cast<long>(nodes.size()), totalCap / layers));
      double bestScore = -1;
      std::vector<std::vector<int>> best;
      for (int k = 1; k <= maxPipes; ++k) {
        PipelineDp dp(nodes, layers, k, dpStateBudget, st.dpStates);
        const int stages = dp.solve();
        if (stages >= kInf) continue;
        const double score = static_cast<double>(k) * k / stages;  // Z(k) = k² / s*(k)
        if (score > bestScore) {
          bestScore = score;
          best = dp.backtrack();
        }
      }
      for (const auto& positions : best) {
        std::vector<Node> p;
        for (int i : positions) p.push_back(nodes[static_cast<size_t>(i)]);
        if (!p.empty()) pipelines.push_back(std::move(p));
      }
      st.usedDp = !pipelines.empty();
    } catch (const OverBudget&) {
      pipelines.clear();
    }
    if (!st.usedDp) pipelines = greedyPipelines(nodes, layers);
  }

  std::vector<std::vector<std::pair<int, int>>> counts;
  for (const auto& p : pipelines) {
    if (auto stages = waterFill(p, layers)) counts.push_back(std::move(*stages));
  }
  st.pipelines = static_cast<int>(counts.size());
  return planFromCounts(pool, model, request, counts);
}

}  // namespace shoal::plan_sim
