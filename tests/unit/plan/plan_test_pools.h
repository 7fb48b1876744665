#pragma once
// Random pools for the planner tests (models with alike or differing layers), and an exhaustive
// reference optimizer written independently of engine/plan's search: it tries every ordered
// device sequence and every split of the layers into it (each stage's own layer range), scores
// each with the cost-model functions, and combines disjoint pipelines by brute force over
// device subsets.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/plan/cost_model.h"
#include "engine/plan/types.h"

namespace plan_test {

using namespace shoal::plan;

struct Instance {
  Pool pool;
  ModelCost model;
  Request request;
};

// "<prefix><i>", built by appending (GCC 12 at -O3 warns falsely on "literal" + std::string).
inline std::string numbered(const char* prefix, int i) {
  std::string s(prefix);
  s += std::to_string(i);
  return s;
}

inline double uniform(std::mt19937_64& rng, double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(rng);
}

inline Device randomDevice(std::mt19937_64& rng, const ModelCost& model, int index, int nodes) {
  Device d;
  d.id = numbered("dev", index);
  d.node = numbered("node", std::uniform_int_distribution<int>(0, nodes - 1)(rng));
  // From a fraction of one layer to more than the whole model, so that pools need one device,
  // several, or cannot fit at all.
  const double modelBytes = model.layers * model.layerWeightBytes;
  d.memoryBytes = modelBytes * uniform(rng, 0.03, 1.4);
  d.bandwidthBytesPerS = uniform(rng, 5e10, 1.5e12);
  d.flopsPerS = uniform(rng, 5e11, 2e14);
  return d;
}

// A pool of `devices` devices on up to 3 nodes, a model of `layers` layers.
inline Instance randomInstance(std::mt19937_64& rng, int devices, int layers) {
  Instance in;
  ModelCost& m = in.model;
  m.layers = layers;
  m.layerWeightBytes = uniform(rng, 2e7, 6e8);
  m.layerFlopsPerToken = m.layerWeightBytes * uniform(rng, 1.5, 4.0);
  m.kvBytesPerTokenPerLayer = uniform(rng, 0, 8192);
  m.hiddenBytesPerToken = uniform(rng, 4096, 65536);
  m.embedBytes = m.layerWeightBytes * uniform(rng, 0, 3);
  m.headBytes = m.layerWeightBytes * uniform(rng, 0, 4);
  m.headFlopsPerToken = m.headBytes * uniform(rng, 1.5, 4.0);
  const int64_t seqs[] = {1, 1, 2, 4, 16};
  in.request.sequences = seqs[std::uniform_int_distribution<int>(0, 4)(rng)];
  in.request.contextTokens = std::uniform_int_distribution<int64_t>(0, 8192)(rng);
  const int nodes = std::uniform_int_distribution<int>(1, 3)(rng);
  for (int i = 0; i < devices; ++i) in.pool.devices.push_back(randomDevice(rng, m, i, nodes));
  in.pool.intraNode = {uniform(rng, 1e-6, 2e-5), uniform(rng, 1e10, 5e10)};
  for (int a = 0; a < nodes; ++a) {
    for (int b = a + 1; b < nodes; ++b) {
      in.pool.links.push_back({numbered("node", a), numbered("node", b),
                               Link{uniform(rng, 5e-5, 5e-3), uniform(rng, 1e7, 2e9)}});
    }
  }
  return in;
}

// Makes the instance's layers differ, around its uniform figures: each layer heavier or lighter
// (0.3x to 2.5x), a third MoE-like (reading a fraction of its weights per token), a third with
// a small attention window, KV per position varying too. The means stay near the old figures.
inline void varyLayers(std::mt19937_64& rng, Instance& in) {
  ModelCost& m = in.model;
  m.perLayer.clear();
  for (int l = 0; l < m.layers; ++l) {
    LayerCost c;
    c.weightBytes = m.layerWeightBytes * uniform(rng, 0.3, 2.5);
    const int kind = std::uniform_int_distribution<int>(0, 2)(rng);
    c.readBytesPerToken = kind == 0 ? c.weightBytes * uniform(rng, 0.1, 0.6) : c.weightBytes;
    c.flopsPerToken = c.readBytesPerToken * uniform(rng, 1.5, 4.0);
    c.kvBytesPerPosition = m.kvBytesPerTokenPerLayer * uniform(rng, 0.5, 1.5);
    c.window = kind == 1 ? std::uniform_int_distribution<int64_t>(1, 2048)(rng) : 0;
    m.perLayer.push_back(c);
  }
}

// Best X reachable, by exhaustion (and, in *bestSingle, the best X of one pipeline). Only for a
// handful of devices and layers.
inline double exhaustiveBestThroughput(const Instance& in, double* bestSingle = nullptr) {
  const LinkTable links(in.pool);
  const int n = static_cast<int>(in.pool.devices.size());
  const int layers = in.model.layers;
  const double sequences = static_cast<double>(in.request.sequences);
  std::vector<double> bestOfSubset(size_t{1} << n, 0.0);
  std::vector<int> seq;
  std::vector<int> parts;

  // Every split of `layers` into seq.size() positive parts that fits memory, scored.
  std::function<void(size_t, int, unsigned)> split = [&](size_t stage, int left, unsigned mask) {
    const size_t k = seq.size();
    const bool last = stage + 1 == k;
    const int first = layers - left;
    for (int take = last ? left : 1; take <= left - static_cast<int>(k - stage - 1); ++take) {
      const Device& d = in.pool.devices[static_cast<size_t>(seq[stage])];
      if (stageMemoryBytes(in.model, in.request, first, take, stage == 0, last) > d.memoryBytes) {
        if (last) return;
        break;  // more layers need more memory
      }
      parts[stage] = take;
      if (!last) {
        split(stage + 1, left - take, mask);
        continue;
      }
      double latency = 0, slowest = 0;
      for (size_t i = 0, at = 0; i < k; at += static_cast<size_t>(parts[i]), ++i) {
        const double t = stageTimeS(in.pool.devices[static_cast<size_t>(seq[i])], in.model,
                                    static_cast<int>(at), parts[i], i + 1 == k);
        latency += t;
        slowest = std::max(slowest, t);
      }
      for (size_t i = 0; i + 1 < k; ++i) {
        const double h =
            hopTimeS(links, in.model, links.nodeOfDevice(seq[i]), links.nodeOfDevice(seq[i + 1]));
        latency += h;
        slowest = std::max(slowest, h);
      }
      const double r =
          returnTimeS(links, links.nodeOfDevice(seq.back()), links.nodeOfDevice(seq.front()));
      latency += r;
      slowest = std::max(slowest, r);
      const double x = pipelineThroughput(sequences, latency, slowest);
      bestOfSubset[mask] = std::max(bestOfSubset[mask], x);
    }
  };
  std::function<void(unsigned)> extend = [&](unsigned mask) {
    for (int i = 0; i < n; ++i) {
      if (mask & (1u << i)) continue;
      seq.push_back(i);
      if (static_cast<int>(seq.size()) <= layers) {
        parts.assign(seq.size(), 0);
        split(0, layers, mask | (1u << i));
        extend(mask | (1u << i));
      }
      seq.pop_back();
    }
  };
  extend(0);

  if (bestSingle) *bestSingle = *std::max_element(bestOfSubset.begin(), bestOfSubset.end());

  // Disjoint pipelines: the best sum over every way to cut the device set into subsets.
  const unsigned full = (1u << n) - 1;
  std::vector<double> best(full + 1, 0.0);
  for (unsigned mask = 1; mask <= full; ++mask) {
    const unsigned low = mask & (~mask + 1);
    best[mask] = best[mask ^ low];
    const unsigned rest = mask ^ low;
    for (unsigned sub = rest;; sub = (sub - 1) & rest) {
      const unsigned s = sub | low;
      if (bestOfSubset[s] > 0) best[mask] = std::max(best[mask], best[mask ^ s] + bestOfSubset[s]);
      if (sub == 0) break;
    }
  }
  return best[full];
}

}  // namespace plan_test
