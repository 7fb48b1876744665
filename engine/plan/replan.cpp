#include "engine/plan/replan.h"

#include <algorithm>
#include <map>
#include <string>

#include "engine/plan/cost_model.h"
#include "engine/plan/pipeline_builder.h"
#include "engine/plan/planner.h"
#include "engine/plan/search.h"

namespace shoal::plan {

double movedWeightBytes(const Plan& before, const Plan& after, const ModelCost& model) {
  struct Held {
    int first, last;
  };
  std::map<std::string, Held> held;
  for (const Pipeline& p : before.pipelines) {
    for (const StageAssignment& s : p.stages) held[s.deviceId] = {s.firstLayer, s.lastLayer};
  }
  auto weights = [&](int first, int last) {
    return last > first ? rangeCost(model, Request{}, first, last - first).weightBytes : 0.0;
  };
  double bytes = 0;
  for (const Pipeline& p : after.pipelines) {
    for (const StageAssignment& s : p.stages) {
      // The layers held before: [keptFirst, keptLast) (empty when keptLast <= keptFirst).
      int keptFirst = 0, keptLast = 0;
      bool hadEmbed = false, hadHead = false;
      auto it = held.find(s.deviceId);
      if (it != held.end()) {
        keptFirst = std::max(s.firstLayer, it->second.first);
        keptLast = std::min(s.lastLayer, it->second.last);
        hadEmbed = it->second.first == 0;
        hadHead = it->second.last == model.layers;
      }
      if (keptLast <= keptFirst) {
        bytes += weights(s.firstLayer, s.lastLayer);
      } else if (model.uniform()) {
        // (layers new to the device) × W, as one product like every uniform cost.
        bytes += (s.lastLayer - s.firstLayer - (keptLast - keptFirst)) * model.layerWeightBytes;
      } else {
        bytes += weights(s.firstLayer, keptFirst) + weights(keptLast, s.lastLayer);
      }
      if (s.firstLayer == 0 && !hadEmbed) bytes += model.embedBytes;
      if (s.lastLayer == model.layers && !hadHead) bytes += model.headBytes;
    }
  }
  return bytes;
}

namespace {

using detail::Layout;
using detail::PipelineResult;
using detail::SearchContext;

// Plans `devices` of the pool on their own and returns the pipelines in the pool's indices.
std::vector<PipelineResult> planSubset(const SearchContext& ctx, const std::vector<int>& devices,
                                       const PlanOptions& options) {
  if (devices.empty()) return {};
  Pool sub = ctx.pool();
  sub.devices.clear();
  for (int d : devices) sub.devices.push_back(ctx.pool().devices[static_cast<size_t>(d)]);
  const Plan p = plan(sub, ctx.model(), ctx.request(), options);
  std::vector<PipelineResult> out;
  for (const Pipeline& pipe : p.pipelines) {
    PipelineResult r;
    r.feasible = true;
    r.throughput = pipe.throughputTokS;
    r.latency = pipe.latencyS;
    for (const StageAssignment& s : pipe.stages) {
      r.order.push_back(devices[static_cast<size_t>(s.device)]);
      r.layers.push_back(s.lastLayer - s.firstLayer);
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<int> freeDevices(const SearchContext& ctx, const std::vector<PipelineResult>& taken) {
  std::vector<char> used(static_cast<size_t>(ctx.deviceCount()), 0);
  for (const PipelineResult& p : taken) {
    for (int d : p.order) used[static_cast<size_t>(d)] = 1;
  }
  std::vector<int> out;
  for (int d = 0; d < ctx.deviceCount(); ++d) {
    if (!used[static_cast<size_t>(d)] && ctx.usable(d)) out.push_back(d);
  }
  return out;
}

// Whether a previous pipeline still covers the model and fits its devices (a kept pipeline's
// ranges are contiguous: they come from a plan).
bool fits(const SearchContext& ctx, const PipelineResult& p) {
  const size_t n = p.order.size();
  int first = 0;
  for (size_t i = 0; i < n; ++i) {
    if (p.layers[i] < 1 || first + p.layers[i] > ctx.layers() ||
        !ctx.fitsRange(p.order[i], first, p.layers[i], i == 0, i + 1 == n)) {
      return false;
    }
    first += p.layers[i];
  }
  return first == ctx.layers();
}

}  // namespace

Replan replan(const Plan& previous, const Pool& pool, const ModelCost& model,
              const Request& request, const PlanOptions& options, double tolerance) {
  validateInputs(pool, model, request);
  const SearchContext ctx(pool, model, request);
  std::map<std::string, int> index;
  for (int d = 0; d < ctx.deviceCount(); ++d) index[pool.devices[static_cast<size_t>(d)].id] = d;

  // The previous pipelines in this pool's indices: intact ones, and the survivors of the rest.
  std::vector<PipelineResult> kept, repaired;
  for (const Pipeline& p : previous.pipelines) {
    PipelineResult r;
    std::vector<int> survivors;
    bool intact = true;
    for (const StageAssignment& s : p.stages) {
      auto it = index.find(s.deviceId);
      if (it == index.end()) {
        intact = false;
        continue;
      }
      survivors.push_back(it->second);
      r.order.push_back(it->second);
      r.layers.push_back(s.lastLayer - s.firstLayer);
    }
    if (intact && fits(ctx, r)) {
      kept.push_back(std::move(r));
    } else if (!survivors.empty()) {
      PipelineResult fixed = detail::optimizeSplit(ctx, survivors);
      if (fixed.feasible) repaired.push_back(std::move(fixed));
    }
  }

  std::vector<Layout> candidates;
  // Intact pipelines stay; everything else is planned beside them.
  Layout keep{kept};
  std::vector<PipelineResult> rest = planSubset(ctx, freeDevices(ctx, kept), options);
  keep.pipelines.insert(keep.pipelines.end(), rest.begin(), rest.end());
  candidates.push_back(keep);
  // Broken pipelines re-split over their survivors too.
  if (!repaired.empty()) {
    Layout fix{kept};
    fix.pipelines.insert(fix.pipelines.end(), repaired.begin(), repaired.end());
    std::vector<PipelineResult> more = planSubset(ctx, freeDevices(ctx, fix.pipelines), options);
    fix.pipelines.insert(fix.pipelines.end(), more.begin(), more.end());
    candidates.push_back(std::move(fix));
  }
  // One free device joins one kept pipeline (a new GPU extending a replica).
  const std::vector<int> spare = freeDevices(ctx, keep.pipelines);
  if (spare.size() <= 16 && kept.size() <= 16) {
    for (int d : spare) {
      for (size_t p = 0; p < kept.size(); ++p) {
        std::vector<int> members = kept[p].order;
        members.push_back(d);
        PipelineResult grown = detail::buildPipeline(ctx, members, true);
        if (!grown.feasible || grown.throughput <= kept[p].throughput) continue;
        Layout l = keep;
        l.pipelines[p] = std::move(grown);
        candidates.push_back(std::move(l));
      }
    }
  }

  std::vector<Replan> choices;
  choices.push_back({plan(pool, model, request, options), 0});
  for (const Layout& l : candidates) {
    Plan p = detail::toPlan(ctx, l);
    if (p.feasible) choices.push_back({std::move(p), 0});
  }
  double bestX = 0;
  for (Replan& r : choices) {
    r.movedBytes = movedWeightBytes(previous, r.plan, model);
    bestX = std::max(bestX, r.plan.throughputTokS);
  }
  // When every previous pipeline survived (devices only joined), the kept plan is a candidate
  // and nothing below its X qualifies: a device that joins never makes the pool slower.
  // (candidates[0], the kept plan, is feasible then and so is choices[1].)
  const bool onlyJoins = !kept.empty() && kept.size() == previous.pipelines.size();
  const double floorX = onlyJoins && choices.size() > 1
                            ? std::max((1 - tolerance) * bestX, choices[1].plan.throughputTokS)
                            : (1 - tolerance) * bestX;
  // Fewest bytes among those that qualify; ties to the larger X, then to the earlier candidate
  // (the fresh plan first).
  size_t pick = 0;
  for (size_t i = 1; i < choices.size(); ++i) {
    const Replan& a = choices[i];
    const Replan& b = choices[pick];
    const bool aIn = a.plan.throughputTokS >= floorX;
    const bool bIn = b.plan.throughputTokS >= floorX;
    if (aIn != bIn) {
      if (aIn) pick = i;
      continue;
    }
    if (a.movedBytes < b.movedBytes ||
        (a.movedBytes == b.movedBytes && a.plan.throughputTokS > b.plan.throughputTokS)) {
      pick = i;
    }
  }
  return std::move(choices[pick]);
}

}  // namespace shoal::plan
