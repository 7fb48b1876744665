// The optimal split of one ordered pipeline when the model's layers differ (sliding-window
// layers, MoE layers, a heavier layer): a stage's costs depend on which layers it holds, not
// only on how many, so the greedy over marginal costs of optimizeSplit does not apply.
//
// Stage i takes [c_i, c_{i+1}) with c_0 = 0 and c_n = L. For a cap tau on every stage time, the
// least total stage time is a DP over the boundaries: best[i + 1][c] = min over c' of
// best[i][c'] + t_i(c', c), where [c', c) must fit device i's memory and t_i ≤ tau. Costs only
// grow as a range grows, so for each c the admissible c' form one run below c. When one term of
// the stage time's max holds for every layer on a device (the usual case: decoding is
// bandwidth-bound) the best c' comes from a sliding-window minimum, O(L) per stage; otherwise a
// scan, O(L · longest range). Range costs are O(1) from the prefix sums (LayerSums). The rows
// of the middle stages are kept between calls: the exhaustive search asks for a prefix of
// devices with every possible last device in turn, which then costs one last stage each.
//
// X_p = 1 / G with G = max(slowest link, slowest stage, (Σ t + Σ links) / S). As in
// optimizeSplit: the least total without a cap is optimal when its slowest stage does not set G;
// otherwise G* is the least tau at which the least total under the cap fits, (least(tau) +
// links) / S ≤ tau, a property that only turns on as tau grows. Bisection finds it to a relative
// 1e-9; each tau that fails gives an upper bound too (the cap (least(tau) + links) / S always
// fits), each that holds the G of the split it found, and a failed probe just below the upper
// bound ends the search early. Among splits at G*, the least total is taken (the T tie-break).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "engine/plan/pipeline_builder.h"

namespace shoal::plan::detail {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kTolerance = 1e-9;  // relative, on G* (and so on X_p)

// The DP after some stages: the least total time with the stages so far ending at c, and where
// the last of them started.
struct Row {
  std::vector<double> best;
  std::vector<int> from;
  int minEnd = 0, maxEnd = -1;  // the reached ends (best finite), when any
};

class RangeSplit {
 public:
  // False when the devices cannot hold the model in this order whatever the split.
  bool prepare(const SearchContext& ctx, std::span<const int> order) {
    if (m_ctx != &ctx || m_context != ctx.id()) {
      m_ctx = &ctx;
      m_context = ctx.id();
      m_rowDevices.clear();
    }
    m_order = order;
    m_linkSum = m_linkMax = 0;
    const int n = static_cast<int>(order.size());
    if (n == 0 || n > ctx.layers()) return false;
    long capacity = 0;  // upper bounds: a quick rejection only
    for (int i = 0; i < n; ++i) {
      const int cap = ctx.capacity(order[static_cast<size_t>(i)], i == 0, i == n - 1);
      if (cap < 1) return false;
      capacity += cap;
    }
    if (capacity < ctx.layers()) return false;
    for (int i = 0; i + 1 < n; ++i) {
      const double h = ctx.hopS(order[static_cast<size_t>(i)], order[static_cast<size_t>(i) + 1]);
      m_linkSum += h;
      m_linkMax = std::max(m_linkMax, h);
    }
    const double r = ctx.returnS(order.back(), order.front());
    m_linkSum += r;
    m_linkMax = std::max(m_linkMax, r);
    return true;
  }

  double linkSum() const { return m_linkSum; }
  double linkMax() const { return m_linkMax; }

  // Least total stage time with every stage time ≤ cap; +inf when no split meets the cap. Writes
  // the layer counts to `layersOut` when given (and finite).
  double fill(double cap, std::vector<int>* layersOut) {
    const size_t n = m_order.size();
    const int layers = m_ctx->layers();
    // Rows of the middle stages computed before for the same devices and cap are still right.
    if (cap != m_rowCap) m_rowDevices.clear();
    m_rowCap = cap;
    size_t keep = 0;
    while (keep < m_rowDevices.size() && keep + 1 < n && m_rowDevices[keep] == m_order[keep])
      ++keep;
    m_rowDevices.resize(keep);
    if (m_rows.size() < n) m_rows.resize(n);
    if (keep == 0) startRow(m_rows[0]);
    for (size_t i = keep; i + 1 < n; ++i) {
      middleStage(static_cast<int>(i), m_order[i], cap, m_rows[i], m_rows[i + 1]);
      m_rowDevices.push_back(m_order[i]);
    }
    int lastStart = -1;
    const double total = lastStage(m_order[n - 1], n == 1, cap, m_rows[n - 1], &lastStart);
    if (layersOut && std::isfinite(total)) {
      layersOut->assign(n, 0);
      (*layersOut)[n - 1] = layers - lastStart;
      for (size_t i = n - 1, c = static_cast<size_t>(lastStart); i > 0; --i) {
        const int start = m_rows[i].from[c];
        (*layersOut)[i - 1] = static_cast<int>(c) - start;
        c = static_cast<size_t>(start);
      }
    }
    return total;
  }

  double totalStages(const std::vector<int>& layers) const {
    double total = 0;
    int first = 0;
    const size_t n = m_order.size();
    for (size_t i = 0; i < n; ++i) {
      total += m_ctx->stageS(m_order[i], first, layers[i], i + 1 == n);
      first += layers[i];
    }
    return total;
  }

  double slowestStage(const std::vector<int>& layers) const {
    double slowest = 0;
    int first = 0;
    const size_t n = m_order.size();
    for (size_t i = 0; i < n; ++i) {
      slowest = std::max(slowest, m_ctx->stageS(m_order[i], first, layers[i], i + 1 == n));
      first += layers[i];
    }
    return slowest;
  }

 private:
  void startRow(Row& row) const {
    const size_t width = static_cast<size_t>(m_ctx->layers()) + 1;
    row.best.assign(width, kInf);
    row.from.assign(width, -1);
    row.best[0] = 0;
    row.minEnd = row.maxEnd = 0;
  }

  // Whether a stage may hold [start, end) on `device` under the cap, and its time.
  bool admits(int device, int start, int end, bool first, bool last, double cap, double* t) const {
    if (!m_ctx->fitsRange(device, start, end - start, first, last)) return false;
    *t = m_ctx->stageS(device, start, end - start, last);
    return *t <= cap;
  }

  // The last stage ends at L: one end, every admissible start.
  double lastStage(int device, bool first, double cap, const Row& in, int* start) const {
    const int layers = m_ctx->layers();
    double best = kInf;
    if (in.maxEnd < 0) return best;
    for (int s = std::min(layers - 1, in.maxEnd); s >= in.minEnd; --s) {
      double t = 0;
      if (!admits(device, s, layers, first, true, cap, &t)) break;  // larger ranges cost more
      const double v = in.best[static_cast<size_t>(s)] + t;
      if (v < best) {
        best = v;
        *start = s;
      }
    }
    return best;
  }

  // Stage i as a middle (or first) stage: every end c < L.
  void middleStage(int i, int device, double cap, const Row& in, Row& out) {
    const size_t width = static_cast<size_t>(m_ctx->layers()) + 1;
    out.best.assign(width, kInf);
    out.from.assign(width, -1);
    if (in.maxEnd >= 0) {
      if (m_ctx->boundKind(device) != 0)
        bySlidingMinimum(i, device, cap, in, out);
      else
        byScan(i, device, cap, in, out);
    }
    out.minEnd = static_cast<int>(width);
    out.maxEnd = -1;
    for (size_t c = 0; c < width; ++c) {
      if (!std::isfinite(out.best[c])) continue;
      out.minEnd = std::min(out.minEnd, static_cast<int>(c));
      out.maxEnd = static_cast<int>(c);
    }
  }

  // Every end, every admissible start: O(L · longest range).
  void byScan(int i, int device, double cap, const Row& in, Row& out) const {
    for (int c = in.minEnd + 1; c < m_ctx->layers(); ++c) {
      double best = kInf;
      for (int s = std::min(c - 1, in.maxEnd); s >= in.minEnd; --s) {
        double t = 0;
        if (!admits(device, s, c, i == 0, false, cap, &t)) break;
        const double v = in.best[static_cast<size_t>(s)] + t;
        if (v < best) {
          best = v;
          out.from[static_cast<size_t>(c)] = s;
        }
      }
      out.best[static_cast<size_t>(c)] = best;
    }
  }

  // When one term of the max sets every range's time on the device (boundKind), t(s, c) =
  // X(c) − X(s) for a prefix X (ΣR / B or ΣF / P), so the best start s for c minimizes
  // best[s] − X(s) over a window of admissible starts that only slides right as c grows: a
  // monotone deque makes the stage O(L).
  void bySlidingMinimum(int i, int device, double cap, const Row& in, Row& out) {
    const Device& d = m_ctx->pool().devices[static_cast<size_t>(device)];
    const bool byBytes = m_ctx->boundKind(device) > 0;
    const LayerSums& sums = m_ctx->sums();
    auto key = [&](int s) {
      const RangeCost& p = sums.prefix(s);
      return in.best[static_cast<size_t>(s)] -
             (byBytes ? p.readBytes / d.bandwidthBytesPerS : p.flops / d.flopsPerS);
    };
    m_window.clear();
    size_t head = 0;  // m_window[head..] is the deque: increasing keys, increasing starts
    int pushed = in.minEnd;
    int lo = in.minEnd;  // least admissible start for the current c
    for (int c = in.minEnd + 1; c < m_ctx->layers(); ++c) {
      for (; pushed <= std::min(c - 1, in.maxEnd); ++pushed) {
        if (!std::isfinite(in.best[static_cast<size_t>(pushed)])) continue;
        const double k = key(pushed);
        while (m_window.size() > head && m_window.back().second >= k) m_window.pop_back();
        m_window.push_back({pushed, k});
      }
      double t = 0;
      while (lo < c && !admits(device, lo, c, i == 0, false, cap, &t)) ++lo;
      while (m_window.size() > head && m_window[head].first < lo) ++head;
      if (m_window.size() == head) continue;
      const int s = m_window[head].first;
      admits(device, s, c, i == 0, false, cap, &t);  // the exact time of the chosen range
      out.best[static_cast<size_t>(c)] = in.best[static_cast<size_t>(s)] + t;
      out.from[static_cast<size_t>(c)] = s;
    }
  }

  const SearchContext* m_ctx = nullptr;
  uint64_t m_context = 0;  // SearchContext::id() the kept rows belong to
  std::span<const int> m_order;
  double m_linkSum = 0, m_linkMax = 0;
  std::vector<Row> m_rows;        // m_rows[i]: after the first i stages as middle stages
  std::vector<int> m_rowDevices;  // the devices of those stages (valid rows: size() + 1)
  double m_rowCap = kInf;         // the cap they were computed under
  std::vector<std::pair<int, double>> m_window;  // (start, key)
};

}  // namespace

PipelineResult optimizeRangeSplit(const SearchContext& ctx, std::span<const int> order) {
  thread_local RangeSplit problem;
  PipelineResult result;
  result.order.assign(order.begin(), order.end());
  if (!problem.prepare(ctx, order)) return result;
  const double seqs = ctx.sequences();
  const double sumAll = problem.fill(kInf, &result.layers);
  if (!std::isfinite(sumAll)) return result;
  const double slowestAll = problem.slowestStage(result.layers);
  const double floorG = std::max(problem.linkMax(), (sumAll + problem.linkSum()) / seqs);
  if (slowestAll > floorG) {
    // Whether the cap is reachable with the total fitting under it too; the least such cap is
    // G*. `need` is what the least total under the cap asks of G, `reached` the G of its split.
    std::vector<int> split;
    auto fitsUnder = [&](double tau, double* need, double* reached) {
      const double sum = problem.fill(tau, &split);
      if (!std::isfinite(sum)) {
        *need = kInf;
        return false;
      }
      *need = (sum + problem.linkSum()) / seqs;
      *reached = std::max({problem.linkMax(), problem.slowestStage(split), *need});
      return *need <= tau * (1 + 1e-12);
    };
    double lo = floorG, hi = slowestAll, need = kInf, reached = kInf;
    if (fitsUnder(lo, &need, &reached)) {
      hi = lo;
    } else {
      hi = std::min(hi, need);
      // Bisection steps alternate with probes just below hi: a probe that fails proves hi = G*
      // (often after a few steps, once hi is the bottleneck of a balanced split), one that
      // holds lowers hi to the G of a better split.
      bool probe = true;
      while (hi - lo > kTolerance * hi) {
        const double tau = probe ? hi * (1 - 1e-12) : 0.5 * (lo + hi);
        probe = !probe;
        if (fitsUnder(tau, &need, &reached)) {
          hi = std::min(tau, reached);
        } else {
          lo = tau;
          // The least total under tau meets the cap `need` as well (a larger cap only lowers
          // the least total), so `need` bounds G* from above.
          hi = std::min(hi, need);
        }
      }
    }
    if (!std::isfinite(problem.fill(hi, &result.layers))) return result;
  }
  scoreSplit(ctx, problem.linkSum(), problem.linkMax(), result);
  return result;
}

void balanceRangeSplit(const SearchContext& ctx, PipelineResult& result) {
  if (!result.feasible || result.order.size() < 2) return;
  thread_local RangeSplit problem;
  if (!problem.prepare(ctx, result.order)) return;
  std::vector<int> layers;
  const double least = problem.fill(kInf, &layers);
  if (!std::isfinite(least)) return;
  const double allowed = least * (1 + 1e-12);  // the same total, to rounding
  // A split a stage cap already shaped (its total above the least) is left as it is.
  if (!(problem.totalStages(result.layers) <= allowed)) return;
  // The least total under a cap only grows as the cap tightens: bisect for the tightest cap that
  // keeps it.
  double lo = 0, hi = problem.slowestStage(result.layers);
  for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (problem.fill(mid, nullptr) <= allowed ? hi : lo) = mid;
  }
  if (problem.fill(hi, &layers) <= allowed) result.layers = layers;
}

}  // namespace shoal::plan::detail
