// Phase-1 search for pools too large to enumerate.
//
// Seeds: sort the usable devices several ways (fastest first; grouped by node; roomiest first;
// along a nearest-neighbour tour of the nodes, and that tour cut into well-linked clusters with
// each cluster fastest first) and run a segment DP over each order: every contiguous run may
// become one pipeline, devices between runs stay unused, and the DP picks the runs with the
// largest total X. Runs of similar, well-linked devices are what the objective rewards: with
// few sequences X_p ≈ S / T_p, so a slow device or a WAN hop in a fast pipeline costs more than
// it adds; with many, X_p ≈ 1 / slowest stage and balance matters.
//
// Local search then repairs what contiguity misses (a big slow device that completes a fast
// pipeline's memory, a device on the wrong side of a run boundary): remove a device, insert an
// unused one, move one between pipelines, swap an unused one in, let an unused one take a
// member into a new pipeline, split or merge pipelines, form new pipelines from unused
// devices, and re-solve one or two pipelines plus spare devices exactly (exactSearch on up to
// 6 devices). A move re-splits only the pipelines it touches and is kept only if X grows, so
// the search ends. Pools above 24 devices use the cheap pipeline builder (cheapest insertion
// instead of re-ordering), fewer candidates per move and two passes, which keeps 512 devices
// well under 100 ms.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>

#include "engine/plan/search.h"

namespace shoal::plan::detail {
namespace {

constexpr double kGain = 1e-9;  // relative gain a move must bring (no cycling on round-off)

class Heuristic {
 public:
  Heuristic(const SearchContext& ctx, const std::vector<int>& usable, const PlanOptions& options)
      : m_ctx(ctx), m_usable(usable), m_options(options) {
    m_large = usable.size() > 24;
    m_limit = options.maxPipelines > 0 ? static_cast<size_t>(options.maxPipelines) : SIZE_MAX;
  }

  Layout run() {
    std::vector<std::vector<int>> orders = seedOrders();
    std::vector<Layout> seeds;
    for (const auto& order : orders) seeds.push_back(segmentDp(order));
    if (!m_large) seeds.push_back(grow(orders.front()));
    std::vector<size_t> rank(seeds.size());
    std::iota(rank.begin(), rank.end(), 0);
    std::stable_sort(rank.begin(), rank.end(), [&](size_t a, size_t b) {
      return seeds[a].throughput() > seeds[b].throughput();
    });
    const size_t polish = m_large ? 1 : seeds.size();
    Layout best;
    for (size_t r = 0; r < polish && r < rank.size(); ++r) {
      Layout l = seeds[rank[r]];
      keepBest(l, m_limit);
      l = improve(std::move(l));
      if (r == 0 || l.throughput() > best.throughput() * (1 + kGain)) best = std::move(l);
    }
    if (m_large) {
      // The search used the quick pipeline builder; give each final pipeline the thorough one.
      for (PipelineResult& p : best.pipelines) {
        PipelineResult r = buildPipeline(m_ctx, p.order, true);
        if (r.feasible && r.throughput > p.throughput) p = std::move(r);
      }
    }
    tieBreak(best);
    return best;
  }

 private:
  PipelineResult build(const std::vector<int>& devices) const {
    return buildPipeline(m_ctx, devices, !m_large);
  }
  // A pipeline with one device more or less. Large pools keep the current order (cheapest
  // insertion / plain removal) instead of re-ordering from scratch.
  PipelineResult plus(const std::vector<int>& order, int d) const {
    return m_large ? extendPipeline(m_ctx, order, d) : build(with(order, d));
  }
  PipelineResult minus(const std::vector<int>& order, int d) const {
    return m_large ? optimizeSplit(m_ctx, without(order, d)) : build(without(order, d));
  }

  // Keeps the `count` pipelines with the largest X (the pipeline-count limit).
  static void keepBest(Layout& l, size_t count) {
    if (l.pipelines.size() <= count) return;
    std::stable_sort(l.pipelines.begin(), l.pipelines.end(),
                     [](const PipelineResult& a, const PipelineResult& b) {
                       return a.throughput > b.throughput;
                     });
    l.pipelines.resize(count);
  }
  // How many more pipelines the limit allows.
  size_t room(const Layout& l) const {
    return l.pipelines.size() >= m_limit ? 0 : m_limit - l.pipelines.size();
  }

  // ---- seeds ---------------------------------------------------------------------------------

  std::vector<std::vector<int>> seedOrders() const {
    const auto& devs = m_ctx.pool().devices;
    auto mem = [&](int d) { return devs[static_cast<size_t>(d)].memoryBytes; };
    auto fasterFirst = [&](int a, int b) {
      if (m_ctx.layerTimeS(a) != m_ctx.layerTimeS(b))
        return m_ctx.layerTimeS(a) < m_ctx.layerTimeS(b);
      if (mem(a) != mem(b)) return mem(a) > mem(b);
      return a < b;
    };
    std::vector<int> byRate = m_usable;
    std::sort(byRate.begin(), byRate.end(), fasterFirst);

    // Grouped by node, nodes by their fastest device, devices by rate within a node.
    std::vector<int> byNode = byRate;
    std::vector<int> nodeRank(static_cast<size_t>(m_ctx.links().nodeCount()), -1);
    int next = 0;
    for (int d : byRate) {
      int& r = nodeRank[static_cast<size_t>(m_ctx.node(d))];
      if (r < 0) r = next++;
    }
    std::stable_sort(byNode.begin(), byNode.end(), [&](int a, int b) {
      return nodeRank[static_cast<size_t>(m_ctx.node(a))] <
             nodeRank[static_cast<size_t>(m_ctx.node(b))];
    });

    std::vector<int> byMemory = m_usable;
    std::sort(byMemory.begin(), byMemory.end(), [&](int a, int b) {
      if (mem(a) != mem(b)) return mem(a) > mem(b);
      return fasterFirst(a, b);
    });

    std::vector<std::vector<int>> orders{byRate};
    auto add = [&](std::vector<int> o) {
      if (std::find(orders.begin(), orders.end(), o) == orders.end())
        orders.push_back(std::move(o));
    };
    add(byNode);
    if (!m_large) add(byMemory);
    if (m_ctx.links().nodeCount() > 2) {
      auto [tour, clustered] = proximityOrders(byRate);
      add(std::move(tour));
      add(std::move(clustered));
    }
    return orders;
  }

  // Orders that keep well-linked devices together (what matters on a WAN): a nearest-neighbour
  // tour over the nodes, starting at the fastest device's node; and the same tour cut into
  // clusters at its expensive hops, with each cluster's devices fastest first.
  std::pair<std::vector<int>, std::vector<int>> proximityOrders(
      const std::vector<int>& byRate) const {
    const int nodeCount = m_ctx.links().nodeCount();
    std::vector<std::vector<int>> perNode(static_cast<size_t>(nodeCount));
    for (int d : byRate) perNode[static_cast<size_t>(m_ctx.node(d))].push_back(d);
    std::vector<int> nodes;
    for (int d : byRate) {
      if (perNode[static_cast<size_t>(m_ctx.node(d))].front() == d) nodes.push_back(m_ctx.node(d));
    }
    std::vector<char> visited(static_cast<size_t>(nodeCount), 0);
    std::vector<int> tourNodes{nodes.front()};
    std::vector<double> stepCost{0.0};
    visited[static_cast<size_t>(nodes.front())] = 1;
    while (tourNodes.size() < nodes.size()) {
      int pick = -1;
      double cost = 0;
      for (int v : nodes) {  // nodes are in rate order: ties go to the faster node
        if (visited[static_cast<size_t>(v)]) continue;
        const double c = m_ctx.nodeHopS(tourNodes.back(), v);
        if (pick < 0 || c < cost) {
          pick = v;
          cost = c;
        }
      }
      visited[static_cast<size_t>(pick)] = 1;
      tourNodes.push_back(pick);
      stepCost.push_back(cost);
    }
    std::vector<double> sorted(stepCost.begin() + 1, stepCost.end());
    std::sort(sorted.begin(), sorted.end());
    const double cheap = sorted.empty() ? 0.0 : 1.5 * sorted[sorted.size() / 4];
    std::vector<int> tour, clustered, cluster;
    auto flush = [&]() {
      std::stable_sort(cluster.begin(), cluster.end(),
                       [&](int a, int b) { return m_ctx.layerTimeS(a) < m_ctx.layerTimeS(b); });
      clustered.insert(clustered.end(), cluster.begin(), cluster.end());
      cluster.clear();
    };
    for (size_t i = 0; i < tourNodes.size(); ++i) {
      if (i > 0 && stepCost[i] > cheap) flush();
      for (int d : perNode[static_cast<size_t>(tourNodes[i])]) {
        tour.push_back(d);
        cluster.push_back(d);
      }
    }
    flush();
    return {tour, clustered};
  }

  // Best set of pipelines made of contiguous runs of `order` (unused devices between runs).
  Layout segmentDp(const std::vector<int>& order) const {
    const size_t n = order.size();
    const int layers = m_ctx.layers();
    const size_t maxLen = std::min<size_t>(n, static_cast<size_t>(layers));
    const int patience = m_large ? 2 : 4;
    std::vector<double> f(n + 1, 0.0);
    std::vector<size_t> from(n + 1, SIZE_MAX);  // SIZE_MAX: device j-1 unused
    std::vector<PipelineResult> seg(n + 1);
    std::vector<int> members;
    for (size_t i = 0; i < n; ++i) {
      if (f[i] > f[i + 1]) {
        f[i + 1] = f[i];
        from[i + 1] = SIZE_MAX;
      }
      members.clear();
      long capSum = 0;
      double bestHere = 0;
      int stale = 0;
      PipelineResult grown;  // large pools: grown by cheapest insertion instead of rebuilt
      for (size_t j = i + 1; j <= n && j - i <= maxLen; ++j) {
        const int d = order[j - 1];
        members.push_back(d);
        capSum += m_ctx.capacity(d, false, false);
        if (m_large) grown = extendPipeline(m_ctx, grown.order, d);
        if (capSum < layers) continue;
        PipelineResult r = m_large ? grown : build(members);
        if (r.feasible && r.throughput > bestHere * (1 + kGain)) {
          bestHere = r.throughput;
          stale = 0;
        } else if (++stale >= patience) {
          break;
        }
        if (r.feasible && f[i] + r.throughput > f[j]) {
          f[j] = f[i] + r.throughput;
          from[j] = i;
          seg[j] = std::move(r);
        }
      }
    }
    Layout layout;
    for (size_t j = n; j > 0;) {
      if (from[j] == SIZE_MAX) {
        --j;
      } else {
        layout.pipelines.push_back(seg[j]);
        j = from[j];
      }
    }
    return layout;
  }

  // Greedy construction that does not need contiguity: anchor on the fastest free device, add
  // whichever device completes the memory (or, once complete, raises X_p) best, repeat.
  Layout grow(std::vector<int> free) const {
    Layout layout;
    const auto& devs = m_ctx.pool().devices;
    const size_t width = m_large ? 8 : 32;  // candidates looked at per step
    while (!free.empty()) {
      std::vector<int> members{free.front()};
      PipelineResult cur = build(members);
      for (;;) {
        std::vector<int> cands;
        for (int d : free) {
          if (std::find(members.begin(), members.end(), d) == members.end()) cands.push_back(d);
        }
        if (cands.empty()) break;
        // The fastest few and the roomiest few.
        std::vector<int> pick(cands.begin(), cands.begin() + static_cast<std::ptrdiff_t>(
                                                                 std::min(width, cands.size())));
        std::vector<int> roomy = cands;
        std::stable_sort(roomy.begin(), roomy.end(), [&](int a, int b) {
          return devs[static_cast<size_t>(a)].memoryBytes >
                 devs[static_cast<size_t>(b)].memoryBytes;
        });
        for (size_t i = 0; i < std::min(width, roomy.size()); ++i) {
          if (std::find(pick.begin(), pick.end(), roomy[i]) == pick.end()) pick.push_back(roomy[i]);
        }
        PipelineResult bestR;
        int bestD = -1;
        for (int d : pick) {
          PipelineResult r = build(with(members, d));
          if (r.feasible && (!bestR.feasible || r.throughput > bestR.throughput)) {
            bestR = std::move(r);
            bestD = d;
          }
        }
        if (cur.feasible) {
          if (bestD < 0 || !gains(bestR.throughput - cur.throughput, cur.throughput)) break;
        } else if (bestD < 0) {
          bestD = roomy.front();  // nothing completes it yet: add the most memory
          bestR = build(with(members, bestD));
        }
        members.push_back(bestD);
        cur = std::move(bestR);
      }
      if (!cur.feasible) break;  // the free devices cannot make one more pipeline
      for (int d : cur.order) free.erase(std::find(free.begin(), free.end(), d));
      layout.pipelines.push_back(std::move(cur));
    }
    return layout;
  }

  // ---- local search --------------------------------------------------------------------------

  static std::vector<int> without(const std::vector<int>& v, int d) {
    std::vector<int> out;
    out.reserve(v.size());
    for (int x : v) {
      if (x != d) out.push_back(x);
    }
    return out;
  }
  static std::vector<int> with(std::vector<int> v, int d) {
    v.push_back(d);
    return v;
  }

  // Pipelines worth trying for device d: all of them in small pools; in large ones the few
  // whose devices are nearest to d's node (hops dominate on a WAN).
  std::vector<size_t> candidates(const Layout& l, int d, size_t skip) const {
    std::vector<size_t> idx;
    for (size_t p = 0; p < l.pipelines.size(); ++p) {
      if (p != skip) idx.push_back(p);
    }
    const size_t limit = m_large ? 4 : 64;
    if (idx.size() <= limit) return idx;
    std::vector<double> dist(l.pipelines.size(), 0.0);
    for (size_t p : idx) {
      double best = 1e300;
      for (int x : l.pipelines[p].order)
        best = std::min(best, m_ctx.nodeHopS(m_ctx.node(d), m_ctx.node(x)));
      dist[p] = best;
    }
    auto nearer = [&](size_t a, size_t b) {
      return dist[a] != dist[b] ? dist[a] < dist[b] : a < b;
    };
    std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(limit), idx.end(),
                     nearer);
    idx.resize(limit);
    std::sort(idx.begin(), idx.end());
    return idx;
  }

  std::vector<int> unusedOf(const Layout& l) const {
    std::vector<char> used(static_cast<size_t>(m_ctx.deviceCount()), 0);
    for (const PipelineResult& p : l.pipelines) {
      for (int d : p.order) used[static_cast<size_t>(d)] = 1;
    }
    std::vector<int> out;
    for (int d : m_usable) {
      if (!used[static_cast<size_t>(d)]) out.push_back(d);
    }
    return out;
  }

  bool gains(double delta, double total) const { return delta > kGain * std::max(total, 1e-300); }

  bool removePass(Layout& l) const {
    bool changed = false;
    for (PipelineResult& p : l.pipelines) {
      for (size_t i = 0; p.order.size() > 1 && i < p.order.size();) {
        PipelineResult r = minus(p.order, p.order[i]);
        if (r.feasible && gains(r.throughput - p.throughput, p.throughput)) {
          p = std::move(r);
          changed = true;
          i = 0;
        } else {
          ++i;
        }
      }
    }
    return changed;
  }

  bool insertPass(Layout& l) const {
    bool changed = false;
    for (int d : unusedOf(l)) {
      double bestGain = 0;
      size_t bestP = SIZE_MAX;
      PipelineResult bestR;
      PipelineResult alone = build(std::vector<int>{d});
      if (alone.feasible && room(l) > 0) {
        bestGain = alone.throughput;
        bestR = alone;
        bestP = l.pipelines.size();
      }
      for (size_t p : candidates(l, d, SIZE_MAX)) {
        PipelineResult r = plus(l.pipelines[p].order, d);
        if (!r.feasible) continue;
        const double g = r.throughput - l.pipelines[p].throughput;
        if (g > bestGain) {
          bestGain = g;
          bestP = p;
          bestR = std::move(r);
        }
      }
      if (bestP != SIZE_MAX && gains(bestGain, l.throughput())) {
        if (bestP == l.pipelines.size())
          l.pipelines.push_back(std::move(bestR));
        else
          l.pipelines[bestP] = std::move(bestR);
        changed = true;
      }
    }
    return changed;
  }

  bool movePass(Layout& l) const {
    bool changed = false;
    for (size_t p = 0; p < l.pipelines.size(); ++p) {
      for (size_t i = 0; i < l.pipelines[p].order.size() && l.pipelines[p].order.size() > 1; ++i) {
        const int d = l.pipelines[p].order[i];
        PipelineResult rp = minus(l.pipelines[p].order, d);
        if (!rp.feasible) continue;
        double bestGain = 0;
        size_t bestQ = SIZE_MAX;
        PipelineResult bestR;
        for (size_t q : candidates(l, d, p)) {
          PipelineResult rq = plus(l.pipelines[q].order, d);
          if (!rq.feasible) continue;
          const double g =
              rp.throughput + rq.throughput - l.pipelines[p].throughput - l.pipelines[q].throughput;
          if (g > bestGain) {
            bestGain = g;
            bestQ = q;
            bestR = std::move(rq);
          }
        }
        if (bestQ != SIZE_MAX && gains(bestGain, l.throughput())) {
          l.pipelines[p] = std::move(rp);
          l.pipelines[bestQ] = std::move(bestR);
          changed = true;
          i = 0;
        }
      }
    }
    return changed;
  }

  // Swap an unused device for a member of a pipeline: tries every member in small pools, the
  // slowest and the smallest member in large ones.
  bool swapPass(Layout& l) const {
    bool changed = false;
    const auto& devs = m_ctx.pool().devices;
    for (int u : unusedOf(l)) {
      double bestGain = 0;
      size_t bestP = SIZE_MAX;
      PipelineResult bestR;
      for (size_t p : candidates(l, u, SIZE_MAX)) {
        const std::vector<int>& members = l.pipelines[p].order;
        std::vector<int> tryOut;
        if (!m_large) {
          tryOut = members;
        } else {
          tryOut.push_back(*std::max_element(members.begin(), members.end(), [&](int a, int b) {
            return m_ctx.layerTimeS(a) < m_ctx.layerTimeS(b);
          }));
          const int small = *std::min_element(members.begin(), members.end(), [&](int a, int b) {
            return devs[static_cast<size_t>(a)].memoryBytes <
                   devs[static_cast<size_t>(b)].memoryBytes;
          });
          if (small != tryOut.front()) tryOut.push_back(small);
        }
        for (int d : tryOut) {
          PipelineResult r = plus(without(members, d), u);
          if (!r.feasible) continue;
          const double g = r.throughput - l.pipelines[p].throughput;
          if (g > bestGain) {
            bestGain = g;
            bestP = p;
            bestR = std::move(r);
          }
        }
      }
      if (bestP != SIZE_MAX && gains(bestGain, l.throughput())) {
        l.pipelines[bestP] = std::move(bestR);
        changed = true;
      }
    }
    return changed;
  }

  // An unused device too small to stand alone takes a member of a pipeline with it into a new
  // pipeline, when the two pipelines together beat the old one.
  bool stealPass(Layout& l) const {
    bool changed = false;
    if (room(l) == 0) return false;
    const auto& devs = m_ctx.pool().devices;
    for (int u : unusedOf(l)) {
      double bestGain = 0;
      size_t bestP = SIZE_MAX;
      PipelineResult bestRest, bestNew;
      for (size_t p : candidates(l, u, SIZE_MAX)) {
        const std::vector<int>& members = l.pipelines[p].order;
        if (members.size() < 2) continue;
        std::vector<int> tryOut = members;
        if (m_large && members.size() > 3) {
          std::vector<int> byMem = members;
          std::stable_sort(byMem.begin(), byMem.end(), [&](int a, int b) {
            return devs[static_cast<size_t>(a)].memoryBytes >
                   devs[static_cast<size_t>(b)].memoryBytes;
          });
          tryOut.assign(byMem.begin(), byMem.begin() + 3);
        }
        for (int d : tryOut) {
          PipelineResult fresh = build(std::vector<int>{u, d});
          if (!fresh.feasible) continue;
          PipelineResult rest = minus(members, d);
          if (!rest.feasible) continue;
          const double g = rest.throughput + fresh.throughput - l.pipelines[p].throughput;
          if (g > bestGain) {
            bestGain = g;
            bestP = p;
            bestRest = std::move(rest);
            bestNew = std::move(fresh);
          }
        }
      }
      if (bestP != SIZE_MAX && gains(bestGain, l.throughput())) {
        l.pipelines[bestP] = std::move(bestRest);
        l.pipelines.push_back(std::move(bestNew));
        changed = true;
      }
    }
    return changed;
  }

  // Large-neighbourhood step: re-solve exactly the devices of one pipeline with the fastest
  // unused devices, or of two pipelines, up to a handful of devices; keep the result if better.
  bool exactRepackPass(Layout& l) const {
    const size_t limit = m_large ? 4 : 6;
    bool changed = false;
    for (size_t p = 0; p < l.pipelines.size(); ++p) {
      std::vector<size_t> partners{SIZE_MAX};
      if (!m_large) {
        for (size_t q : candidates(l, l.pipelines[p].order.front(), p)) {
          if (q > p) partners.push_back(q);
        }
      }
      for (size_t q : partners) {
        if (p >= l.pipelines.size() || (q != SIZE_MAX && q >= l.pipelines.size())) break;
        std::vector<int> devices = l.pipelines[p].order;
        double before = l.pipelines[p].throughput;
        if (q != SIZE_MAX) {
          devices.insert(devices.end(), l.pipelines[q].order.begin(), l.pipelines[q].order.end());
          before += l.pipelines[q].throughput;
        }
        if (devices.size() > limit) continue;
        // Spare devices join a single pipeline's re-solve; pairs trade members among themselves
        // (filling them up too would make every re-solve the largest and dearest).
        std::vector<int> spare = q == SIZE_MAX ? unusedOf(l) : std::vector<int>{};
        std::stable_sort(spare.begin(), spare.end(),
                         [&](int a, int b) { return m_ctx.layerTimeS(a) < m_ctx.layerTimeS(b); });
        for (int d : spare) {
          if (devices.size() >= limit) break;
          devices.push_back(d);
        }
        std::sort(devices.begin(), devices.end());
        if (!m_repacked.insert(devices).second) continue;  // solved before: nothing to gain
        const size_t replaced = q != SIZE_MAX ? 2 : 1;
        const int allowed = m_limit == SIZE_MAX ? 0 : static_cast<int>(replaced + room(l));
        Layout sub = exactSearch(m_ctx, devices, 0.0, allowed);
        if (!gains(sub.throughput() - before, l.throughput())) continue;
        if (q != SIZE_MAX) l.pipelines.erase(l.pipelines.begin() + static_cast<std::ptrdiff_t>(q));
        l.pipelines.erase(l.pipelines.begin() + static_cast<std::ptrdiff_t>(p));
        for (auto& r : sub.pipelines) l.pipelines.push_back(std::move(r));
        changed = true;
        --p;  // the slot now holds the next pipeline
        break;
      }
    }
    return changed;
  }

  // The weakest pipelines (lowest X) together, up to a handful of devices, re-solved exactly with
  // the fastest spare devices: gains hide where pipelines are poor, and three or more small
  // ones can trade members in ways no single move reaches.
  bool weakestRepackPass(Layout& l) const {
    const size_t limit = m_large ? 5 : 6;
    std::vector<size_t> idx(l.pipelines.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
      return l.pipelines[a].throughput < l.pipelines[b].throughput;
    });
    std::vector<size_t> taken;
    std::vector<int> devices;
    double before = 0;
    for (size_t p : idx) {
      if (devices.size() + l.pipelines[p].order.size() > limit) continue;
      taken.push_back(p);
      devices.insert(devices.end(), l.pipelines[p].order.begin(), l.pipelines[p].order.end());
      before += l.pipelines[p].throughput;
    }
    if (taken.size() < 2) return false;
    std::vector<int> spare = unusedOf(l);
    std::stable_sort(spare.begin(), spare.end(),
                     [&](int a, int b) { return m_ctx.layerTimeS(a) < m_ctx.layerTimeS(b); });
    for (int d : spare) {
      if (devices.size() >= limit) break;
      devices.push_back(d);
    }
    std::sort(devices.begin(), devices.end());
    if (!m_repacked.insert(devices).second) return false;
    const int allowed = m_limit == SIZE_MAX ? 0 : static_cast<int>(taken.size() + room(l));
    Layout sub = exactSearch(m_ctx, devices, 0.0, allowed);
    if (!gains(sub.throughput() - before, l.throughput())) return false;
    std::sort(taken.rbegin(), taken.rend());
    for (size_t p : taken) l.pipelines.erase(l.pipelines.begin() + static_cast<std::ptrdiff_t>(p));
    for (auto& r : sub.pipelines) l.pipelines.push_back(std::move(r));
    return true;
  }

  // Merge two pipelines into one (helps when one long pipeline beats two short ones, e.g. with
  // many sequences and cheap links). Pairs among the weakest pipelines only in large pools.
  bool mergePass(Layout& l) const {
    std::vector<size_t> idx(l.pipelines.size());
    std::iota(idx.begin(), idx.end(), 0);
    if (m_large && idx.size() > 12) {
      std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
        return l.pipelines[a].throughput < l.pipelines[b].throughput;
      });
      idx.resize(12);
    }
    for (size_t a = 0; a < idx.size(); ++a) {
      for (size_t b = a + 1; b < idx.size(); ++b) {
        const PipelineResult& pa = l.pipelines[idx[a]];
        const PipelineResult& pb = l.pipelines[idx[b]];
        std::vector<int> both = pa.order;
        both.insert(both.end(), pb.order.begin(), pb.order.end());
        PipelineResult r = build(both);
        if (r.feasible && gains(r.throughput - pa.throughput - pb.throughput, l.throughput())) {
          const size_t keep = std::min(idx[a], idx[b]);
          const size_t drop = std::max(idx[a], idx[b]);
          l.pipelines[keep] = std::move(r);
          l.pipelines.erase(l.pipelines.begin() + static_cast<std::ptrdiff_t>(drop));
          return true;
        }
      }
    }
    return false;
  }

  // Re-cut each pipeline's devices (plus nothing else) with the segment DP: splits a pipeline
  // in two, or drops members, when that pays.
  bool splitPass(Layout& l) const {
    bool changed = false;
    const size_t count = l.pipelines.size();
    for (size_t p = 0; p < count; ++p) {
      if (l.pipelines[p].order.size() < 2) continue;
      std::vector<int> members = l.pipelines[p].order;
      std::sort(members.begin(), members.end(), [&](int a, int b) {
        if (m_ctx.layerTimeS(a) != m_ctx.layerTimeS(b))
          return m_ctx.layerTimeS(a) < m_ctx.layerTimeS(b);
        return a < b;
      });
      Layout cut = segmentDp(members);
      if (cut.pipelines.size() >= 2 && cut.pipelines.size() - 1 <= room(l) &&
          gains(cut.throughput() - l.pipelines[p].throughput, l.throughput())) {
        l.pipelines[p] = std::move(cut.pipelines[0]);
        for (size_t k = 1; k < cut.pipelines.size(); ++k)
          l.pipelines.push_back(std::move(cut.pipelines[k]));
        changed = true;
      }
    }
    return changed;
  }

  // New pipelines from devices nobody uses.
  bool newPipelinesPass(Layout& l) const {
    std::vector<int> rest = unusedOf(l);
    if (rest.empty()) return false;
    std::sort(rest.begin(), rest.end(), [&](int a, int b) {
      if (m_ctx.layerTimeS(a) != m_ctx.layerTimeS(b))
        return m_ctx.layerTimeS(a) < m_ctx.layerTimeS(b);
      return a < b;
    });
    if (room(l) == 0) return false;
    Layout extra = segmentDp(rest);
    if (extra.pipelines.empty()) extra = grow(rest);
    keepBest(extra, room(l));
    if (extra.pipelines.empty()) return false;
    for (auto& p : extra.pipelines) l.pipelines.push_back(std::move(p));
    return true;
  }

  Layout improve(Layout l) const {
    // Large pools: the first passes bring nearly all of the gain; the rest is not worth the time.
    const int passes =
        m_large ? std::min(2, m_options.maxLocalSearchPasses) : m_options.maxLocalSearchPasses;
    for (int pass = 0; pass < passes; ++pass) {
      bool changed = false;
      changed |= newPipelinesPass(l);
      changed |= removePass(l);
      changed |= insertPass(l);
      changed |= movePass(l);
      changed |= swapPass(l);
      changed |= stealPass(l);
      changed |= splitPass(l);
      changed |= exactRepackPass(l);
      changed |= weakestRepackPass(l);
      while (mergePass(l)) changed = true;
      if (!changed) break;
    }
    return l;
  }

  // Among layouts within the tolerance of the X found, prefer a smaller largest T_p: drop the
  // slowest pipelines while the loss stays inside the tolerance.
  void tieBreak(Layout& l) const {
    if (m_options.latencyTolerance <= 0 || l.pipelines.size() < 2) return;
    const double floorX = l.throughput() * (1 - m_options.latencyTolerance);
    while (l.pipelines.size() > 1) {
      auto slowest = std::max_element(
          l.pipelines.begin(), l.pipelines.end(),
          [](const PipelineResult& a, const PipelineResult& b) { return a.latency < b.latency; });
      if (l.throughput() - slowest->throughput < floorX) break;
      l.pipelines.erase(slowest);
    }
  }

  const SearchContext& m_ctx;
  const std::vector<int>& m_usable;
  const PlanOptions& m_options;
  bool m_large = false;
  size_t m_limit = SIZE_MAX;  // most pipelines allowed
  // Device sets already re-solved exactly; the same set gives the same answer again.
  mutable std::set<std::vector<int>> m_repacked;
};

}  // namespace

Layout heuristicSearch(const SearchContext& ctx, const std::vector<int>& usable,
                       const PlanOptions& options) {
  if (usable.empty()) return {};
  return Heuristic(ctx, usable, options).run();
}

}  // namespace shoal::plan::detail
