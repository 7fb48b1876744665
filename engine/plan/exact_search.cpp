#include <algorithm>
#include <limits>

#include "engine/plan/search.h"

namespace shoal::plan::detail {

double Layout::throughput() const {
  double x = 0;
  for (const PipelineResult& p : pipelines) x += p.throughput;
  return x;
}

double Layout::maxLatency() const {
  double t = 0;
  for (const PipelineResult& p : pipelines) t = std::max(t, p.latency);
  return t;
}

namespace {

bool betterPipeline(const PipelineResult& a, const PipelineResult& b) {
  if (!b.feasible) return a.feasible;
  if (!a.feasible) return false;
  if (a.throughput != b.throughput) return a.throughput > b.throughput;
  return a.latency < b.latency;
}

class ExactSearch {
 public:
  ExactSearch(const SearchContext& ctx, const std::vector<int>& usable, size_t maxPipelines)
      : m_ctx(ctx),
        m_usable(usable),
        m_maxPipelines(maxPipelines),
        m_best(size_t{1} << usable.size()) {}

  Layout run(double tolerance) {
    std::vector<int> prefix;
    for (size_t f = 0; f < m_usable.size(); ++f) {
      prefix.assign(1, m_usable[f]);
      consider(prefix, 1u << f);
      enumerate(prefix, 1u << f);
    }

    const unsigned full = (1u << m_usable.size()) - 1;
    std::vector<unsigned> choice;
    const double bestX = solve(std::numeric_limits<double>::infinity(), choice);
    if (bestX <= 0) return {};

    // Tie-break: the smallest latency cap under which the best X (less the tolerance) is
    // still reachable.
    std::vector<double> caps;
    for (const PipelineResult& p : m_best) {
      if (p.feasible) caps.push_back(p.latency);
    }
    std::sort(caps.begin(), caps.end());
    caps.erase(std::unique(caps.begin(), caps.end()), caps.end());
    const double floorX = bestX * (1 - tolerance) - 1e-12 * bestX;
    // Reaching floorX is monotone in the cap: bisect over the candidate caps.
    size_t lo = 0, hi = caps.size() - 1;  // the largest cap allows every pipeline: reaches bestX
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      if (solve(caps[mid], choice) >= floorX)
        hi = mid;
      else
        lo = mid + 1;
    }
    solve(caps[lo], choice);

    Layout layout;
    const size_t width = m_maxPipelines + 1;
    size_t c = m_maxPipelines;
    for (unsigned mask = full; mask != 0;) {
      const unsigned low = mask & (~mask + 1);
      const unsigned sub = choice[mask * width + c];
      if (sub == 0) {
        mask ^= low;
      } else {
        layout.pipelines.push_back(m_best[sub]);
        mask ^= sub;
        if (m_maxPipelines > 0) --c;
      }
    }
    return layout;
  }

 private:
  void consider(const std::vector<int>& seq, unsigned mask) {
    PipelineResult r = optimizeSplit(m_ctx, seq);
    if (betterPipeline(r, m_best[mask])) m_best[mask] = std::move(r);
  }

  // Every pipeline over a subset of the devices: a first device, middle devices (those of one
  // order class in index order only, as their order changes nothing), and a last device.
  void enumerate(std::vector<int>& prefix, unsigned mask) {
    const int n = static_cast<int>(m_usable.size());
    const int layers = m_ctx.layers();
    if (static_cast<int>(prefix.size()) + 1 > layers) return;
    for (int i = 0; i < n; ++i) {
      if (mask & (1u << i)) continue;
      prefix.push_back(m_usable[static_cast<size_t>(i)]);
      consider(prefix, mask | (1u << i));
      prefix.pop_back();
    }
    if (static_cast<int>(prefix.size()) + 2 > layers) return;
    for (int i = 0; i < n; ++i) {
      if (mask & (1u << i)) continue;
      const int d = m_usable[static_cast<size_t>(i)];
      bool canonical = true;
      for (size_t j = 1; j < prefix.size(); ++j) {
        if (m_ctx.orderClass(prefix[j]) == m_ctx.orderClass(d) && prefix[j] > d) canonical = false;
      }
      if (!canonical) continue;
      prefix.push_back(d);
      enumerate(prefix, mask | (1u << i));
      prefix.pop_back();
    }
  }

  // Best total X over disjoint pipelines whose latency is at most `latencyCap`, with at most
  // m_maxPipelines of them when that is set. choice[mask · W + c] is the pipeline (subset)
  // holding the lowest device of mask when c more pipelines may be opened, or 0 when that
  // device stays unused.
  double solve(double latencyCap, std::vector<unsigned>& choice) {
    const unsigned full = (1u << m_usable.size()) - 1;
    const size_t limit = m_maxPipelines;  // 0: any number
    const size_t width = limit + 1;
    std::vector<double> best((full + 1) * width, 0.0);
    choice.assign((full + 1) * width, 0);
    for (unsigned mask = 1; mask <= full; ++mask) {
      const unsigned low = mask & (~mask + 1);
      const unsigned rest = mask ^ low;
      for (size_t c = 0; c < width; ++c) {
        const size_t at = mask * width + c;
        best[at] = best[rest * width + c];
        if (limit > 0 && c == 0) continue;  // no pipeline left to open
        const size_t before = limit > 0 ? c - 1 : c;
        for (unsigned sub = rest;; sub = (sub - 1) & rest) {
          const unsigned s = sub | low;
          const PipelineResult& p = m_best[s];
          if (p.feasible && p.latency <= latencyCap) {
            const double v = best[(mask ^ s) * width + before] + p.throughput;
            if (v > best[at]) {
              best[at] = v;
              choice[at] = s;
            }
          }
          if (sub == 0) break;
        }
      }
    }
    return best[full * width + limit];
  }

  const SearchContext& m_ctx;
  const std::vector<int>& m_usable;
  size_t m_maxPipelines;               // 0: any number
  std::vector<PipelineResult> m_best;  // per device subset: its best pipeline
};

}  // namespace

double exactSequenceCount(const SearchContext& ctx, const std::vector<int>& devices) {
  // Sequences the enumeration visits: n one-device pipelines, plus for every (first, last) pair
  // and every set of middle devices, the orders of the middle that differ in class sequence:
  // |M|! / Π over classes of (devices of that class in M)!. Summed with a polynomial product
  // over classes, Π_class Σ_m C(avail_class, m) x^m / m!, whose x^j coefficient times j! counts
  // the middles of size j. (Classes are nodes when the layers are alike, else devices.)
  const size_t n = devices.size();
  std::vector<int> classes;
  for (int d : devices) classes.push_back(ctx.orderClass(d));
  std::vector<int> distinct = classes;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  const size_t maxMiddle =
      std::min<size_t>(n >= 2 ? n - 2 : 0, static_cast<size_t>(std::max(0, ctx.layers() - 2)));
  double total = static_cast<double>(n);
  std::vector<double> poly, next;
  for (size_t f = 0; f < n; ++f) {
    for (size_t l = 0; l < n; ++l) {
      if (f == l || ctx.layers() < 2) continue;
      poly.assign(maxMiddle + 1, 0.0);
      poly[0] = 1;
      for (int cls : distinct) {
        int avail = static_cast<int>(std::count(classes.begin(), classes.end(), cls));
        avail -= (classes[f] == cls) + (classes[l] == cls);
        next.assign(maxMiddle + 1, 0.0);
        double binomOverFact = 1;  // C(avail, m) / m!
        for (int m = 0; m <= avail && static_cast<size_t>(m) <= maxMiddle; ++m) {
          if (m > 0)
            binomOverFact *= static_cast<double>(avail - m + 1) / (static_cast<double>(m) * m);
          for (size_t j = 0; j + static_cast<size_t>(m) <= maxMiddle; ++j) {
            next[j + static_cast<size_t>(m)] += poly[j] * binomOverFact;
          }
        }
        poly.swap(next);
      }
      double factorial = 1;
      for (size_t j = 0; j <= maxMiddle; ++j) {
        if (j > 0) factorial *= static_cast<double>(j);
        total += poly[j] * factorial;
      }
    }
  }
  return total;
}

Layout exactSearch(const SearchContext& ctx, const std::vector<int>& usable, double tolerance,
                   int maxPipelines) {
  if (usable.empty()) return {};
  const size_t limit = maxPipelines > 0 && static_cast<size_t>(maxPipelines) < usable.size()
                           ? static_cast<size_t>(maxPipelines)
                           : 0;
  return ExactSearch(ctx, usable, limit).run(tolerance);
}

}  // namespace shoal::plan::detail
