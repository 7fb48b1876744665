#include "engine/plan/fit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>

#include "engine/gguf/gguf_file.h"
#include "engine/gguf/tensor_type.h"
#include "engine/model/model_config.h"
#include "engine/plan/model_cost.h"
#include "engine/plan/planner.h"

namespace shoal::plan {
namespace {

// 1 GbE: ~0.15 ms one way, ~117 MB/s of payload.
constexpr Link kUnmeasuredLink{1.5e-4, 1.17e8};

// The first tensor no backend can compute with (a type Shoal reads but has no kernels for, such
// as the IQ2 family), named for the verdict; "" when every tensor is computable.
std::string uncomputableTensor(const gguf::File& header) {
  for (const gguf::TensorInfo& t : header.tensors()) {
    const auto traits = gguf::typeTraits(static_cast<uint32_t>(t.type));
    if (!traits || !traits->dequantizable) {
      return "tensor " + t.name + " has type " + gguf::typeName(t.type) +
             ", which Shoal cannot compute with";
    }
  }
  return {};
}

// KV-cache bytes of one sequence of `context` tokens: each layer caches its K_l per position,
// a sliding-window layer at most its window.
double kvBytes(const ModelCost& cost, int64_t context) {
  const double c = static_cast<double>(context);
  if (cost.uniform()) return cost.kvBytesPerTokenPerLayer * cost.layers * c;
  double sum = 0;
  for (const LayerCost& l : cost.perLayer) {
    const double positions = l.window > 0 ? std::min(c, static_cast<double>(l.window)) : c;
    sum += l.kvBytesPerPosition * positions;
  }
  return sum;
}

}  // namespace

FitEstimate estimateFit(const gguf::File& header, const Pool& pool, int64_t contextTokens) {
  FitEstimate fit;
  try {
    fit.architecture = header.getStringOr("general.architecture", "");
    for (const gguf::TensorInfo& t : header.tensors())
      fit.weightBytes += static_cast<double>(t.nbytes);
    for (const Device& d : pool.devices) fit.availableBytes += d.memoryBytes;
    // Throws naming the architecture, a split model or the key when Shoal cannot run this model.
    const model::ModelConfig config = model::ModelConfig::fromGguf(header);
    if (std::string bad = uncomputableTensor(header); !bad.empty()) {
      fit.reason = bad;
      return fit;
    }
    fit.contextTokens = contextTokens;
    if (config.nCtxTrain > 0)
      fit.contextTokens = std::min<int64_t>(contextTokens, config.nCtxTrain);
    const ModelCost cost = modelCostFromGguf(header, fit.contextTokens);
    fit.kvCacheBytes = kvBytes(cost, fit.contextTokens);
    if (pool.devices.empty()) {
      fit.reason = "no devices to run it on";
      return fit;
    }
    // Links the caller has not measured (a pool listed but not yet profiled) count as a wired
    // gigabit LAN: an estimate made before download should not fail for want of a ping.
    Pool planned = pool;
    if (!planned.defaultLink) planned.defaultLink = kUnmeasuredLink;
    // One chat: one pipeline holding one sequence, as the app and `pool generate` deploy it.
    PlanOptions options;
    options.maxPipelines = 1;
    const Plan p = plan(planned, cost, Request{fit.contextTokens, 1}, options);
    if (!p.feasible) {
      fit.reason = p.infeasibleReason;
      fit.missingBytes = p.missingBytes;
      return fit;
    }
    fit.runs = true;
    fit.tokensPerS = p.throughputTokS;
    fit.stages = p.pipelines.empty() ? 0 : static_cast<int>(p.pipelines.front().stages.size());
  } catch (const std::exception& e) {
    fit.runs = false;
    fit.reason = e.what();
  }
  return fit;
}

std::string formatBytes(double bytes) {
  const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = std::max(0.0, bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 4) {
    v /= 1024.0;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof text, "%.0f B", v);
  } else {
    std::snprintf(text, sizeof text, "%.1f %s", v, kUnits[unit]);
  }
  return text;
}

}  // namespace shoal::plan
