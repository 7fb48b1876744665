#include "engine/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "engine/error.h"
#include "engine/plan/cost_model.h"
#include "engine/plan/pipeline_builder.h"
#include "engine/plan/search.h"

namespace shoal::plan {
namespace {

void requireFinite(double v, const std::string& field, bool positive) {
  if (!std::isfinite(v) || v < 0 || (positive && v == 0)) {
    throw Error(field + ": must be a finite number " + (positive ? "> 0" : ">= 0") + ", got " +
                std::to_string(v));
  }
}

std::string gib(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

// Why no pipeline fits, and how much memory would make one fit.
void diagnose(const Pool& pool, const ModelCost& model, const Request& request, Plan& out) {
  const double per = perLayerBytes(model, request);  // the mean when the layers differ
  const double need = stageMemoryBytes(model, request, 0, model.layers, true, true);
  double total = 0, largest = 0;
  long layersHeld = 0;
  bool embedFits = false, headFits = false;
  for (const Device& d : pool.devices) {
    total += d.memoryBytes;
    largest = std::max(largest, d.memoryBytes);
    layersHeld += layerCapacity(d, model, request, false, false);
    embedFits |= layerCapacity(d, model, request, true, false) >= 1;
    headFits |= layerCapacity(d, model, request, false, true) >= 1;
  }
  const std::string kv = "KV cache for " + std::to_string(request.sequences) + " x " +
                         std::to_string(request.contextTokens) + " tokens";
  if (pool.devices.empty()) {
    out.missingBytes = need;
    out.infeasibleReason =
        "the pool has no devices; the model needs " + gib(need) + " (with " + kv + ")";
  } else if (total < need) {
    out.missingBytes = need - total;
    out.infeasibleReason = "the model needs " + gib(need) + " (weights, embedding, head and " + kv +
                           ") but the pool has " + gib(total) + ": " + gib(need - total) +
                           " missing";
  } else if (layersHeld < model.layers) {
    out.missingBytes = static_cast<double>(model.layers - layersHeld) * per;
    out.infeasibleReason = "the devices can hold only " + std::to_string(layersHeld) + " of " +
                           std::to_string(model.layers) + " layers (" +
                           (model.uniform() ? "" : "on average ") + gib(per) + " each with the " +
                           kv + "): about " + gib(out.missingBytes) + " missing";
  } else if (!embedFits || !headFits) {
    const double part = embedFits ? model.headBytes : model.embedBytes;
    out.missingBytes = std::max(0.0, part + per - largest);
    out.infeasibleReason = std::string("no device can hold the ") +
                           (embedFits ? "output head" : "token embedding") + " (" + gib(part) +
                           ") plus one layer; the largest has " + gib(largest) + ": " +
                           gib(out.missingBytes) + " missing";
  } else {
    out.missingBytes = 0;
    out.infeasibleReason =
        "no device order can hold the embedding, every layer and the head at once";
  }
}

}  // namespace

void validateInputs(const Pool& pool, const ModelCost& model, const Request& request) {
  if (model.layers < 1)
    throw Error("model.layers: must be >= 1, got " + std::to_string(model.layers));
  requireFinite(model.layerWeightBytes, "model.layer_weight_bytes", false);
  requireFinite(model.layerFlopsPerToken, "model.layer_flops_per_token", false);
  requireFinite(model.kvBytesPerTokenPerLayer, "model.kv_bytes_per_token_per_layer", false);
  if (!model.perLayer.empty() && model.perLayer.size() != static_cast<size_t>(model.layers)) {
    throw Error("model.per_layer: must list " + std::to_string(model.layers) + " layers, got " +
                std::to_string(model.perLayer.size()));
  }
  for (size_t l = 0; l < model.perLayer.size(); ++l) {
    const LayerCost& c = model.perLayer[l];
    const std::string at = "model.per_layer[" + std::to_string(l) + "]";
    requireFinite(c.weightBytes, at + ".weight_bytes", false);
    requireFinite(c.readBytesPerToken, at + ".read_bytes_per_token", false);
    requireFinite(c.flopsPerToken, at + ".flops_per_token", false);
    requireFinite(c.kvBytesPerPosition, at + ".kv_bytes_per_position", false);
    if (c.window < 0) throw Error(at + ".window: must be >= 0, got " + std::to_string(c.window));
  }
  requireFinite(model.hiddenBytesPerToken, "model.hidden_bytes_per_token", false);
  requireFinite(model.embedBytes, "model.embed_bytes", false);
  requireFinite(model.headBytes, "model.head_bytes", false);
  requireFinite(model.sharedEmbedHeadBytes, "model.shared_embed_head_bytes", false);
  requireFinite(model.headFlopsPerToken, "model.head_flops_per_token", false);
  if (request.contextTokens < 0) throw Error("request.context_tokens: must be >= 0");
  if (request.sequences < 1) throw Error("request.sequences: must be >= 1");
  std::set<std::string> ids;
  for (size_t i = 0; i < pool.devices.size(); ++i) {
    const Device& d = pool.devices[i];
    const std::string at = "devices[" + std::to_string(i) + "]";
    if (d.id.empty()) throw Error(at + ".id: must not be empty");
    if (!ids.insert(d.id).second) throw Error(at + ".id: duplicate id '" + d.id + "'");
    requireFinite(d.memoryBytes, at + ".memory_bytes", false);
    requireFinite(d.bandwidthBytesPerS, at + ".bandwidth_bytes_per_s", true);
    requireFinite(d.flopsPerS, at + ".flops_per_s", true);
  }
  requireFinite(pool.intraNode.latencyS, "intra_node.latency_s", false);
  requireFinite(pool.intraNode.bandwidthBytesPerS, "intra_node.bandwidth_bytes_per_s", true);
  if (pool.defaultLink) {
    requireFinite(pool.defaultLink->latencyS, "default_link.latency_s", false);
    requireFinite(pool.defaultLink->bandwidthBytesPerS, "default_link.bandwidth_bytes_per_s", true);
  }
  for (size_t i = 0; i < pool.links.size(); ++i) {
    const std::string at = "links[" + std::to_string(i) + "]";
    requireFinite(pool.links[i].link.latencyS, at + ".latency_s", false);
    requireFinite(pool.links[i].link.bandwidthBytesPerS, at + ".bandwidth_bytes_per_s", true);
  }
}

Plan plan(const Pool& pool, const ModelCost& model, const Request& request,
          const PlanOptions& options) {
  validateInputs(pool, model, request);
  const detail::SearchContext ctx(pool, model, request);
  std::vector<int> usable;
  for (int d = 0; d < ctx.deviceCount(); ++d) {
    if (ctx.usable(d)) usable.push_back(d);
  }
  const bool exhaustive = static_cast<int>(usable.size()) <= options.exactDeviceLimit &&
                          detail::exactSequenceCount(ctx, usable) <= options.exactSequenceBudget;
  const detail::Layout layout =
      exhaustive ? detail::exactSearch(ctx, usable, options.latencyTolerance, options.maxPipelines)
                 : detail::heuristicSearch(ctx, usable, options);

  Plan out = detail::toPlan(ctx, layout);
  if (!out.feasible) diagnose(pool, model, request, out);
  return out;
}

namespace detail {

Plan toPlan(const SearchContext& ctx, const Layout& layout) {
  const Pool& pool = ctx.pool();
  Plan out;
  std::vector<char> used(pool.devices.size(), 0);
  for (detail::PipelineResult r : layout.pipelines) {
    balanceSplit(ctx, r);
    Pipeline p;
    int first = 0;
    for (size_t i = 0; i < r.order.size(); ++i) {
      StageAssignment s;
      s.device = r.order[i];
      s.deviceId = pool.devices[static_cast<size_t>(s.device)].id;
      s.firstLayer = first;
      s.lastLayer = first + r.layers[i];
      first = s.lastLayer;
      used[static_cast<size_t>(s.device)] = 1;
      p.stages.push_back(std::move(s));
    }
    out.pipelines.push_back(std::move(p));
  }
  evaluatePlan(pool, ctx.links(), ctx.model(), ctx.request(), out);
  // Fastest pipeline first; ties by first device so the output is stable.
  std::stable_sort(out.pipelines.begin(), out.pipelines.end(),
                   [](const Pipeline& a, const Pipeline& b) {
                     if (a.throughputTokS != b.throughputTokS)
                       return a.throughputTokS > b.throughputTokS;
                     return a.stages.front().device < b.stages.front().device;
                   });
  for (size_t d = 0; d < pool.devices.size(); ++d) {
    if (!used[d]) out.unusedDevices.push_back(pool.devices[d].id);
  }
  out.feasible = !out.pipelines.empty();
  return out;
}

}  // namespace detail

}  // namespace shoal::plan
