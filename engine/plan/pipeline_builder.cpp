#include "engine/plan/pipeline_builder.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

namespace shoal::plan::detail {

SearchContext::SearchContext(const Pool& pool, const ModelCost& model, const Request& request)
    : m_pool(pool), m_model(model), m_request(request), m_links(pool), m_sums(model, request) {
  static std::atomic<uint64_t> contexts{0};
  m_id = ++contexts;
  const size_t n = pool.devices.size();
  m_nodes = static_cast<size_t>(m_links.nodeCount());
  // assign() rather than resize(): GCC 12 -O3 warns (falsely) of a null dereference in resize.
  m_node.assign(n, 0);
  m_layerTime.assign(n, 0.0);
  m_headTime.assign(n, 0.0);
  m_cap.assign(n * 4, 0);
  m_bound.assign(n, 0);
  for (size_t d = 0; d < n; ++d) {
    const Device& dev = pool.devices[d];
    if (!m_sums.uniform()) {
      bool memory = true, compute = true;
      for (const LayerCost& c : model.perLayer) {
        const double byBytes = c.readBytesPerToken / dev.bandwidthBytesPerS;
        const double byFlops = c.flopsPerToken / dev.flopsPerS;
        memory = memory && byBytes >= byFlops;
        compute = compute && byFlops >= byBytes;
      }
      m_bound[d] = memory ? 1 : compute ? -1 : 0;
    }
    m_node[d] = m_links.nodeOfDevice(static_cast<int>(d));
    m_layerTime[d] = m_sums.uniform()
                         ? stageTimeS(dev, model, m_sums.range(0, 1), false)
                         : stageTimeS(dev, model, m_sums.range(0, model.layers), false) /
                               static_cast<double>(model.layers);
    m_headTime[d] = stageTimeS(dev, model, RangeCost{}, true);
    for (int role = 0; role < 4; ++role) {
      m_cap[d * 4 + static_cast<size_t>(role)] =
          layerCapacity(dev, model, m_sums, (role & 1) != 0, (role & 2) != 0);
    }
  }
  m_hop.assign(m_nodes * m_nodes, 0.0);
  m_return.assign(m_nodes * m_nodes, 0.0);
  for (size_t a = 0; a < m_nodes; ++a) {
    for (size_t b = 0; b < m_nodes; ++b) {
      m_hop[a * m_nodes + b] = hopTimeS(m_links, model, static_cast<int>(a), static_cast<int>(b));
      m_return[a * m_nodes + b] = returnTimeS(m_links, static_cast<int>(a), static_cast<int>(b));
    }
  }
}

namespace {

// A run of equal marginal costs: `count` more layers on `stage`, each adding `slope` seconds.
struct Segment {
  double slope;
  int stage;
  int count;  // for non-last stages: bounded by the stage's room instead
  int seq;    // keeps the last stage's segments in their (increasing) order on equal slopes
};

// The split problem of one ordered pipeline, with everything that does not depend on the
// bottleneck threshold precomputed. A threshold tau caps every stage time; fill() gives the
// least total stage time reachable under it (greedy on marginal costs, exact because every
// stage time is convex in its layer count).
class SplitProblem {
 public:
  // Reused across calls (one per thread) so the search does not allocate per evaluation.
  bool prepare(const SearchContext& ctx, std::span<const int> order) {
    m_ctx = &ctx;
    m_order = order;
    m_segments.clear();
    m_linkSum = m_linkMax = 0;
    const int n = static_cast<int>(m_order.size());
    const int layers = m_ctx->layers();
    if (n == 0 || n > layers) return false;
    m_cap.assign(static_cast<size_t>(n), 0);
    long sumCap = 0;
    for (int i = 0; i < n; ++i) {
      m_cap[static_cast<size_t>(i)] =
          m_ctx->capacity(m_order[static_cast<size_t>(i)], i == 0, i == n - 1);
      if (m_cap[static_cast<size_t>(i)] < 1) return false;
      sumCap += m_cap[static_cast<size_t>(i)];
    }
    if (sumCap < layers) return false;
    for (int i = 0; i + 1 < n; ++i) {
      const double h =
          m_ctx->hopS(m_order[static_cast<size_t>(i)], m_order[static_cast<size_t>(i) + 1]);
      m_linkSum += h;
      m_linkMax = std::max(m_linkMax, h);
    }
    const double r = m_ctx->returnS(m_order.back(), m_order.front());
    m_linkSum += r;
    m_linkMax = std::max(m_linkMax, r);

    const ModelCost& m = m_ctx->model();
    const Device& last = m_ctx->pool().devices[static_cast<size_t>(m_order.back())];
    m_a1 = m.layerWeightBytes / last.bandwidthBytesPerS;
    m_b1 = m.headBytes / last.bandwidthBytesPerS;
    m_a2 = m.layerFlopsPerToken / last.flopsPerS;
    m_b2 = m.headFlopsPerToken / last.flopsPerS;

    m_base = lastTime(1);
    for (int i = 0; i + 1 < n; ++i) {
      const double tau = m_ctx->layerTimeS(m_order[static_cast<size_t>(i)]);
      m_base += tau;
      m_segments.push_back({tau, i, 0, 0});
    }
    addLastSegments(n - 1);
    std::sort(m_segments.begin(), m_segments.end(), [](const Segment& x, const Segment& y) {
      if (x.slope != y.slope) return x.slope < y.slope;
      if (x.stage != y.stage) return x.stage < y.stage;
      return x.seq < y.seq;
    });
    m_room.assign(static_cast<size_t>(n), 0);
    return true;
  }

  double lastTime(int k) const { return std::max(m_a1 * k + m_b1, m_a2 * k + m_b2); }
  double stageTime(int i, int k) const {
    if (i == static_cast<int>(m_order.size()) - 1) return lastTime(k);
    return k * m_ctx->layerTimeS(m_order[static_cast<size_t>(i)]);
  }

  // Layer counts minimizing the slowest stage (greedy: each next layer goes where it makes the
  // smallest stage time; exact since stage times are increasing in k). Returns that time.
  double balanced(std::vector<int>& layers) {
    const int n = static_cast<int>(m_order.size());
    layers.assign(static_cast<size_t>(n), 1);
    m_heap.clear();
    double slowest = 0;
    for (int i = 0; i < n; ++i) {
      slowest = std::max(slowest, stageTime(i, 1));
      if (m_cap[static_cast<size_t>(i)] > 1) m_heap.push_back({stageTime(i, 2), i});
    }
    auto later = [](const std::pair<double, int>& a, const std::pair<double, int>& b) {
      return a.first != b.first ? a.first > b.first : a.second > b.second;
    };
    std::make_heap(m_heap.begin(), m_heap.end(), later);
    for (int left = m_ctx->layers() - n; left > 0; --left) {
      std::pop_heap(m_heap.begin(), m_heap.end(), later);
      const auto [t, i] = m_heap.back();
      m_heap.pop_back();
      int& k = layers[static_cast<size_t>(i)];
      ++k;
      slowest = std::max(slowest, t);
      if (k < m_cap[static_cast<size_t>(i)]) {
        m_heap.push_back({stageTime(i, k + 1), i});
        std::push_heap(m_heap.begin(), m_heap.end(), later);
      }
    }
    return slowest;
  }

  double linkSum() const { return m_linkSum; }
  double linkMax() const { return m_linkMax; }
  int cap(int i) const { return m_cap[static_cast<size_t>(i)]; }
  double sequences() const { return m_ctx->sequences(); }

  // Largest layer count stage i can take without exceeding tau (and its capacity). tau is often
  // exactly some stage time k·t, and tau / t may round to just under k: allow for that.
  int bound(int i, double tau) const {
    auto layersWithin = [](double x) { return std::floor(x * (1 + 1e-12) + 1e-9); };
    const int n = static_cast<int>(m_order.size());
    const int cap = m_cap[static_cast<size_t>(i)];
    if (i == n - 1) {
      double k = cap;
      if (m_a1 > 0)
        k = std::min(k, layersWithin((tau - m_b1) / m_a1));
      else if (m_b1 > tau)
        k = 0;
      if (m_a2 > 0)
        k = std::min(k, layersWithin((tau - m_b2) / m_a2));
      else if (m_b2 > tau)
        k = 0;
      return static_cast<int>(std::max(k, 0.0));
    }
    const double t = m_ctx->layerTimeS(m_order[static_cast<size_t>(i)]);
    if (t <= 0) return cap;
    return static_cast<int>(std::min<double>(cap, layersWithin(tau / t)));
  }

  // Least total stage time with every stage time ≤ tau; +inf when tau cannot be met. Writes the
  // layer counts to `layersOut` when given.
  double fill(double tau, std::vector<int>* layersOut) {
    const int n = static_cast<int>(m_order.size());
    long sumBound = 0;
    for (int i = 0; i < n; ++i) {
      const int u = bound(i, tau);
      if (u < 1) return std::numeric_limits<double>::infinity();
      m_room[static_cast<size_t>(i)] = u - 1;
      sumBound += u;
    }
    if (sumBound < m_ctx->layers()) return std::numeric_limits<double>::infinity();
    if (layersOut) layersOut->assign(static_cast<size_t>(n), 1);
    int remaining = m_ctx->layers() - n;
    double sum = m_base;
    for (const Segment& s : m_segments) {
      if (remaining == 0) break;
      int& room = m_room[static_cast<size_t>(s.stage)];
      int take = std::min(room, remaining);
      if (s.stage == n - 1) take = std::min(take, s.count);
      if (take <= 0) continue;
      sum += take * s.slope;
      room -= take;
      remaining -= take;
      if (layersOut) (*layersOut)[static_cast<size_t>(s.stage)] += take;
    }
    return sum;
  }

  bool feasible(double tau) {
    if (tau < m_linkMax) return false;
    const double sum = fill(tau, nullptr);
    if (!std::isfinite(sum)) return false;
    return (sum + m_linkSum) <= m_ctx->sequences() * tau * (1 + 1e-12);
  }

 private:
  // The head makes the last stage's time the max of two lines in k; its marginal costs are the
  // slope of the line that dominates at small k, one transitional step, then the other slope.
  void addLastSegments(int stage) {
    const int big = m_ctx->layers();
    double sLow = m_a1, iLow = m_b1, sHigh = m_a2, iHigh = m_b2;
    if (sLow > sHigh) {
      std::swap(sLow, sHigh);
      std::swap(iLow, iHigh);
    }
    const bool lowDominatesAtOne = sLow * 1 + iLow > sHigh * 1 + iHigh;
    if (sLow == sHigh || !lowDominatesAtOne) {
      m_segments.push_back({sHigh, stage, big, 0});
      return;
    }
    // Largest k where the flatter line still dominates.
    const double cross = (iLow - iHigh) / (sHigh - sLow);
    const int kc = static_cast<int>(std::min<double>(std::floor(cross), big));
    if (kc > 1) m_segments.push_back({sLow, stage, kc - 1, 0});
    m_segments.push_back({lastTime(kc + 1) - lastTime(kc), stage, 1, 1});
    m_segments.push_back({sHigh, stage, big, 2});
  }

  const SearchContext* m_ctx = nullptr;
  std::span<const int> m_order;
  std::vector<int> m_cap;
  std::vector<int> m_room;
  std::vector<Segment> m_segments;
  std::vector<std::pair<double, int>> m_heap;
  double m_linkSum = 0, m_linkMax = 0;
  double m_a1 = 0, m_b1 = 0, m_a2 = 0, m_b2 = 0;
  double m_base = 0;  // total stage time with one layer per stage
};

}  // namespace

// Case 3 of optimizeSplit: the least bottleneck tau in (tau0, hi] at which the total stage time
// also fits, (least total under tau + links) / S ≤ tau. The least total only changes where some
// stage can take one more layer, so search those breakpoints: between two of them the best tau
// is max(breakpoint, (total + links) / S). Falls back to bisection when there are too many.
double bindingBottleneck(SplitProblem& problem, int n, double tau0, double hi) {
  thread_local std::vector<double> points;
  points.clear();
  points.push_back(tau0);
  constexpr size_t kMaxPoints = 512;
  for (int i = 0; i < n && points.size() <= kMaxPoints; ++i) {
    for (int k = problem.bound(i, tau0) + 1; k <= problem.cap(i); ++k) {
      const double t = problem.stageTime(i, k);
      if (t > hi) break;
      points.push_back(t);
      if (points.size() > kMaxPoints) break;
    }
  }
  if (points.size() > kMaxPoints) {
    double lo = tau0;
    for (int iter = 0; iter < 200 && hi - lo > 1e-11 * hi; ++iter) {
      const double mid = 0.5 * (lo + hi);
      if (problem.feasible(mid))
        hi = mid;
      else
        lo = mid;
    }
    return hi;
  }
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  const double seqs = problem.sequences();
  auto settle = [&](size_t j) {  // best tau inside [points[j], points[j+1]), or +inf
    const double need = (problem.fill(points[j], nullptr) + problem.linkSum()) / seqs;
    const double tau = std::max(points[j], need);
    const bool inside = j + 1 == points.size() || tau < points[j + 1];
    return inside ? tau : std::numeric_limits<double>::infinity();
  };
  size_t lo = 0, up = points.size() - 1;  // settle(up) is finite: hi is feasible
  while (lo < up) {
    const size_t mid = (lo + up) / 2;
    if (std::isfinite(settle(mid)))
      up = mid;
    else
      lo = mid + 1;
  }
  return std::min(settle(lo), hi);
}

void scoreSplit(const SearchContext& ctx, double linkSum, double linkMax, PipelineResult& result) {
  const size_t n = result.order.size();
  double latency = linkSum;
  double slowest = linkMax;
  int first = 0;
  for (size_t i = 0; i < n; ++i) {
    const double t = ctx.stageS(result.order[i], first, result.layers[i], i + 1 == n);
    first += result.layers[i];
    latency += t;
    slowest = std::max(slowest, t);
  }
  result.feasible = true;
  result.latency = latency;
  result.throughput = pipelineThroughput(ctx.sequences(), latency, slowest);
}

// Alike layers: stage times depend on layer counts only and are convex in them, which the
// greedy below relies on; other models take optimizeRangeSplit.
PipelineResult optimizeSplit(const SearchContext& ctx, std::span<const int> order) {
  if (!ctx.uniform()) return optimizeRangeSplit(ctx, order);
  thread_local SplitProblem problem;
  PipelineResult result;
  result.order.assign(order.begin(), order.end());
  if (!problem.prepare(ctx, order)) return result;
  const int n = static_cast<int>(order.size());
  const double inf = std::numeric_limits<double>::infinity();
  auto slowestStage = [&](const std::vector<int>& k) {
    double t = 0;
    for (int i = 0; i < n; ++i) t = std::max(t, problem.stageTime(i, k[static_cast<size_t>(i)]));
    return t;
  };

  // G(k) = max(slowest link, slowest stage, (Σ stage + Σ link) / S) is what X_p inverts.
  // 1. The least total stage time (no cap on a stage): optimal when its slowest stage does not
  //    set G, since nothing beats the least total. Always the case for S = 1.
  const double sumAll = problem.fill(inf, &result.layers);
  const double slowestAll = slowestStage(result.layers);
  const double floorG = std::max(problem.linkMax(), (sumAll + problem.linkSum()) / ctx.sequences());
  if (slowestAll > floorG) {
    // 2. The most balanced split: optimal when the total does not set G at its bottleneck.
    std::vector<int> even;
    const double tau0 = std::max(problem.balanced(even), problem.linkMax());
    double hi = tau0;
    if (!problem.feasible(tau0)) hi = bindingBottleneck(problem, n, tau0, slowestAll);
    // The least total stage time under that bottleneck (the T tie-break).
    if (!std::isfinite(problem.fill(hi, &result.layers))) return result;
  }

  // Score the split with the cost-model formulas themselves.
  scoreSplit(ctx, problem.linkSum(), problem.linkMax(), result);
  return result;
}

void balanceSplit(const SearchContext& ctx, PipelineResult& result) {
  if (!ctx.uniform()) return balanceRangeSplit(ctx, result);
  if (!result.feasible || result.order.size() < 2) return;
  SplitProblem problem;
  if (!problem.prepare(ctx, result.order)) return;
  const int n = static_cast<int>(result.order.size());
  double current = 0, slowest = 0;
  for (int i = 0; i < n; ++i) {
    const double t = problem.stageTime(i, result.layers[static_cast<size_t>(i)]);
    current += t;
    slowest = std::max(slowest, t);
  }
  const double least = problem.fill(std::numeric_limits<double>::infinity(), nullptr);
  const double allowed = least * (1 + 1e-12);  // the same total, to rounding
  // A split a stage bound already shaped (its total above the least) is left as it is.
  if (!(current <= allowed)) return;
  std::vector<int> layers;
  double lo = problem.balanced(layers), hi = slowest;
  const auto leastWithin = [&](double tau, std::vector<int>* out) {
    return problem.fill(tau, out) <= allowed;
  };
  if (leastWithin(lo, &layers)) {
    result.layers = layers;
    return;
  }
  // The least total only grows as the bound tightens: bisect for the tightest bound keeping it.
  for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (leastWithin(mid, nullptr) ? hi : lo) = mid;
  }
  if (leastWithin(hi, &layers)) result.layers = layers;
}

namespace {

bool better(const PipelineResult& a, const PipelineResult& b) {
  if (a.feasible != b.feasible) return a.feasible;
  if (a.throughput != b.throughput) return a.throughput > b.throughput;
  return a.latency < b.latency;
}

// Node order with the cheapest chain of hops plus token return: exhaustive for a few nodes,
// nearest neighbour from every start otherwise.
std::vector<int> orderNodes(const SearchContext& ctx, const std::vector<int>& nodes) {
  const size_t g = nodes.size();
  auto cost = [&](const std::vector<int>& seq) {
    double c = ctx.nodeReturnS(seq.back(), seq.front());
    for (size_t i = 0; i + 1 < seq.size(); ++i) c += ctx.nodeHopS(seq[i], seq[i + 1]);
    return c;
  };
  std::vector<int> best = nodes;
  double bestCost = cost(best);
  if (g <= 4) {
    std::vector<int> perm = nodes;
    while (std::next_permutation(perm.begin(), perm.end())) {
      const double c = cost(perm);
      if (c < bestCost) {
        bestCost = c;
        best = perm;
      }
    }
    return best;
  }
  const size_t starts = g <= 24 ? g : 1;
  for (size_t s = 0; s < starts; ++s) {
    std::vector<int> seq{nodes[s]};
    std::vector<char> used(g, 0);
    used[s] = 1;
    while (seq.size() < g) {
      size_t pick = g;
      for (size_t j = 0; j < g; ++j) {
        if (used[j]) continue;
        if (pick == g ||
            ctx.nodeHopS(seq.back(), nodes[j]) < ctx.nodeHopS(seq.back(), nodes[pick])) {
          pick = j;
        }
      }
      used[pick] = 1;
      seq.push_back(nodes[pick]);
    }
    const double c = cost(seq);
    if (c < bestCost) {
      bestCost = c;
      best = seq;
    }
  }
  return best;
}

// Devices worth trying in the first or last role of a group. The first stage pays the embedding
// in memory only; the last pays the head in memory and in time. Small pipelines try every
// device; larger ones the few that suit the role best.
std::vector<int> roleCandidates(const SearchContext& ctx, const std::vector<int>& group, bool last,
                                bool tryAll) {
  if (tryAll || group.size() <= 2) return group;
  const auto& devs = ctx.pool().devices;
  auto mem = [&](int d) { return devs[static_cast<size_t>(d)].memoryBytes; };
  std::vector<int> out;
  auto add = [&](int d) {
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  };
  add(*std::max_element(group.begin(), group.end(),
                        [&](int a, int b) { return mem(a) != mem(b) ? mem(a) < mem(b) : a > b; }));
  if (last) {
    add(*std::min_element(group.begin(), group.end(), [&](int a, int b) {
      if (ctx.capacity(a, false, true) < 1) return false;
      if (ctx.capacity(b, false, true) < 1) return true;
      return ctx.headTimeS(a) != ctx.headTimeS(b) ? ctx.headTimeS(a) < ctx.headTimeS(b) : a < b;
    }));
  } else {
    // The slowest device is the one the split wants to give few layers: free a fast one.
    add(*std::max_element(group.begin(), group.end(), [&](int a, int b) {
      return ctx.layerTimeS(a) != ctx.layerTimeS(b) ? ctx.layerTimeS(a) < ctx.layerTimeS(b) : a > b;
    }));
  }
  return out;
}

// Devices grouped by node in the given node order, with `first` leading and `last` closing.
std::vector<int> layOut(const std::vector<std::vector<int>>& groups, int first, int last) {
  std::vector<int> order{first};
  for (const auto& group : groups) {
    for (int d : group) {
      if (d != first && d != last) order.push_back(d);
    }
  }
  order.push_back(last);
  return order;
}

}  // namespace

void forEachDistinctOrder(const SearchContext& ctx, std::span<const int> devices,
                          const std::function<void(std::span<const int>)>& visit) {
  const size_t n = devices.size();
  if (n == 0) return;
  std::vector<int> order;
  std::vector<char> used(n, 0);
  // Middle devices of one order class are interchangeable: visit them in increasing index only.
  std::function<void(int)> middle = [&](int remaining) {
    if (remaining == 0) {
      for (size_t i = 0; i < n; ++i) {
        if (used[i]) continue;
        order.push_back(devices[i]);
        visit(order);
        order.pop_back();
      }
      return;
    }
    for (size_t i = 0; i < n; ++i) {
      if (used[i]) continue;
      const int d = devices[i];
      bool canonical = true;
      for (size_t j = 1; j < order.size(); ++j) {
        if (ctx.orderClass(order[j]) == ctx.orderClass(d) && order[j] > d) canonical = false;
      }
      if (!canonical) continue;
      // d must also precede, in index order, every unused same-node device that will follow it
      // in the middle; the check above enforces that when those are placed.
      used[i] = 1;
      order.push_back(d);
      middle(remaining - 1);
      order.pop_back();
      used[i] = 0;
    }
  };
  if (n == 1) {
    visit(devices);
    return;
  }
  for (size_t f = 0; f < n; ++f) {
    used[f] = 1;
    order.assign(1, devices[f]);
    middle(static_cast<int>(n) - 2);
    used[f] = 0;
  }
}

PipelineResult buildPipeline(const SearchContext& ctx, std::span<const int> devices,
                             bool thorough) {
  if (devices.size() <= 1) return optimizeSplit(ctx, devices);
  if (thorough && devices.size() <= 5) {
    PipelineResult best;
    forEachDistinctOrder(ctx, devices, [&](std::span<const int> order) {
      PipelineResult r = optimizeSplit(ctx, order);
      if (better(r, best)) best = std::move(r);
    });
    return best;
  }
  std::vector<int> nodes;
  for (int d : devices) nodes.push_back(ctx.node(d));
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());

  // Node orders to try. The link-cheapest chain and its reverse always; when thorough, every
  // order of up to 4 nodes, else every rotation of the cheapest chain (the first node holds the
  // embedding and the last the head, so which node ends the chain matters beyond its links).
  std::vector<std::vector<int>> nodeOrders;
  const std::vector<int> cheapest = nodes.size() > 1 ? orderNodes(ctx, nodes) : nodes;
  if (thorough && nodes.size() <= 4) {
    std::vector<int> perm = nodes;
    do nodeOrders.push_back(perm);
    while (std::next_permutation(perm.begin(), perm.end()));
  } else {
    const size_t rotations = thorough ? nodes.size() : 1;
    for (size_t r = 0; r < rotations; ++r) {
      std::vector<int> o = cheapest;
      std::rotate(o.begin(), o.begin() + static_cast<std::ptrdiff_t>(r), o.end());
      nodeOrders.push_back(o);
      if (o.size() > 1) {
        std::reverse(o.begin(), o.end());
        nodeOrders.push_back(std::move(o));
      }
    }
  }

  const bool tryAll = thorough ? devices.size() <= 6 : devices.size() <= 3;
  PipelineResult best;
  std::vector<std::vector<int>> groups;
  for (const std::vector<int>& nodeOrder : nodeOrders) {
    groups.assign(nodeOrder.size(), {});
    for (size_t gi = 0; gi < nodeOrder.size(); ++gi) {
      for (int d : devices) {
        if (ctx.node(d) == nodeOrder[gi]) groups[gi].push_back(d);
      }
    }
    for (int last : roleCandidates(ctx, groups.back(), true, tryAll)) {
      for (int first : roleCandidates(ctx, groups.front(), false, tryAll)) {
        if (first == last) continue;
        PipelineResult r = optimizeSplit(ctx, layOut(groups, first, last));
        if (better(r, best)) best = std::move(r);
      }
    }
  }
  return best;
}

PipelineResult extendPipeline(const SearchContext& ctx, const std::vector<int>& order, int device) {
  std::vector<int> next;
  next.reserve(order.size() + 1);
  if (order.empty()) {
    next.push_back(device);
    return optimizeSplit(ctx, next);
  }
  // Added link time of inserting before position p (p = size: after the last device).
  const size_t n = order.size();
  auto added = [&](size_t p) {
    if (p == 0)
      return ctx.hopS(device, order.front()) + ctx.returnS(order.back(), device) -
             ctx.returnS(order.back(), order.front());
    if (p == n)
      return ctx.hopS(order.back(), device) + ctx.returnS(device, order.front()) -
             ctx.returnS(order.back(), order.front());
    return ctx.hopS(order[p - 1], device) + ctx.hopS(device, order[p]) -
           ctx.hopS(order[p - 1], order[p]);
  };
  size_t best = n >= 2 ? 1 : n;
  double bestCost = added(best);
  for (size_t p = 0; p <= n; ++p) {
    const double c = added(p);
    if (c < bestCost - 1e-15) {
      bestCost = c;
      best = p;
    }
  }
  auto insertAt = [&](size_t p) {
    next.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(p));
    next.push_back(device);
    next.insert(next.end(), order.begin() + static_cast<std::ptrdiff_t>(p), order.end());
    return optimizeSplit(ctx, next);
  };
  PipelineResult result = insertAt(best);
  // The new device may suit a role better (the head on a fast device, the embedding on a roomy
  // one): try it at either end too when that adds no link time.
  for (size_t p : {size_t{0}, n}) {
    if (p == best || added(p) > bestCost + 1e-15) continue;
    PipelineResult r = insertAt(p);
    if (better(r, result)) result = std::move(r);
  }
  return result;
}

}  // namespace shoal::plan::detail
