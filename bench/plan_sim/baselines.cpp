#include "bench/plan_sim/baselines.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "engine/plan/cost_model.h"

namespace shoal::plan_sim {

using plan::Plan;

Plan planFromCounts(const plan::Pool& pool, const plan::ModelCost& model,
                    const plan::Request& request,
                    const std::vector<std::vector<std::pair<int, int>>>& pipelines) {
  Plan out;
  std::vector<char> used(pool.devices.size(), 0);
  for (const auto& counts : pipelines) {
    plan::Pipeline p;
    int first = 0;
    for (const auto& [device, layers] : counts) {
      if (layers <= 0) continue;
      plan::StageAssignment s;
      s.device = device;
      s.deviceId = pool.devices[static_cast<size_t>(device)].id;
      s.firstLayer = first;
      s.lastLayer = first + layers;
      first = s.lastLayer;
      used[static_cast<size_t>(device)] = 1;
      p.stages.push_back(s);
    }
    if (!p.stages.empty()) out.pipelines.push_back(std::move(p));
  }
  for (size_t d = 0; d < pool.devices.size(); ++d) {
    if (!used[d]) out.unusedDevices.push_back(pool.devices[d].id);
  }
  const std::vector<std::string> broken = plan::planViolations(pool, model, request, out);
  out.feasible = broken.empty() && !out.pipelines.empty();
  if (!out.feasible) {
    out.infeasibleReason = broken.empty() ? "no pipeline" : broken.front();
    return out;
  }
  plan::evaluatePlan(pool, model, request, out);
  return out;
}

Plan equalSplit(const plan::Pool& pool, const plan::ModelCost& model,
                const plan::Request& request) {
  const int n = static_cast<int>(pool.devices.size());
  std::vector<std::pair<int, int>> counts;
  for (int d = 0; d < n; ++d)
    counts.push_back({d, model.layers / n + (d < model.layers % n ? 1 : 0)});
  return planFromCounts(pool, model, request, {counts});
}

Plan exoMemorySplit(const plan::Pool& pool, const plan::ModelCost& model,
                    const plan::Request& request) {
  std::vector<int> order(pool.devices.size());
  std::iota(order.begin(), order.end(), 0);
  // exo sorts by (memory, node id) descending.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const auto& da = pool.devices[static_cast<size_t>(a)];
    const auto& db = pool.devices[static_cast<size_t>(b)];
    if (da.memoryBytes != db.memoryBytes) return da.memoryBytes > db.memoryBytes;
    return da.id > db.id;
  });
  double total = 0;
  for (const auto& d : pool.devices) total += d.memoryBytes;
  std::vector<std::pair<int, int>> counts;
  double start = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const double end =
        std::round((start + pool.devices[static_cast<size_t>(order[i])].memoryBytes / total) *
                   1e5) /
        1e5;
    const int first = static_cast<int>(start * model.layers);
    const int last = i + 1 == order.size() ? model.layers : static_cast<int>(end * model.layers);
    counts.push_back({order[i], std::max(0, last - first)});
    start = end;
  }
  return planFromCounts(pool, model, request, {counts});
}

Plan llamaCppMemorySplit(const plan::Pool& pool, const plan::ModelCost& model,
                         const plan::Request& request) {
  const size_t n = pool.devices.size();
  std::vector<double> cumulative(n);
  double total = 0;
  for (const auto& d : pool.devices) total += d.memoryBytes;
  double run = 0;
  for (size_t i = 0; i < n; ++i) {
    run += pool.devices[i].memoryBytes;
    cumulative[i] = run / total;
  }
  std::vector<std::pair<int, int>> counts;
  for (size_t i = 0; i < n; ++i) counts.push_back({static_cast<int>(i), 0});
  // llama.cpp counts the output layer as layer L of L + 1 when it picks devices
  // (llama-model.cpp, get_layer_buft_list: upper_bound(splits, il / act_gpu_layers)).
  for (int l = 0; l < model.layers; ++l) {
    const double at = static_cast<double>(l) / (model.layers + 1);
    const size_t dev = static_cast<size_t>(
        std::upper_bound(cumulative.begin(), cumulative.end(), at) - cumulative.begin());
    counts[std::min(dev, n - 1)].second++;
  }
  return planFromCounts(pool, model, request, {counts});
}

}  // namespace shoal::plan_sim
