// shoal_plan_sim: Shoal's planner against the splits of exo, llama.cpp and distributed-llama and
// against Parallax's allocator, on generated home labs and volunteer swarms, all scored by
// Shoal's cost model (engine/plan/cost_model.h). Prints a JSON summary.
//
//   shoal_plan_sim [--home-labs N] [--per-size N] [--sizes 8,16,...] [--seed S]
//                  [--write-pools DIR]
//
// Ratios are Shoal / baseline for throughput X, and baseline / Shoal for latency: of the slowest
// pipeline (the objective's second criterion: the worst a request can get) and of the fastest
// (what a lone request gets). Both > 1 mean Shoal is better. They are taken over the pools where
// both plans fit in memory; "baseline_infeasible" counts pools where the baseline's split
// overflows a device while Shoal's plan fits. Shoal's objective may give up to 1% of X for a
// lower slowest-pipeline latency; "below_1" counts pools where Shoal's X is lower, and
// "below_1_latency_trades" those of them where that is this trade (X within 1%, slowest
// pipeline faster). "*_pure_x" figures are for Shoal with the trade turned off. "single_chat"
// compares, on pools with one sequence, Shoal limited to one pipeline (the home default:
// PlanOptions::maxPipelines = 1) with the baseline's fastest pipeline, in time per token.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/plan_sim/baselines.h"
#include "bench/plan_sim/parallax_allocator.h"
#include "bench/plan_sim/scenarios.h"
#include "engine/plan/planner.h"
#include "engine/plan/pool_file.h"

using namespace shoal;
using Json = nlohmann::ordered_json;

namespace {

struct Options {
  int homeLabs = 300;
  int perSize = 5;
  std::vector<int> sizes{8, 16, 32, 64, 128, 256, 512};
  uint64_t seed = 1;
  std::string writePools;
};

double fastestLatency(const plan::Plan& p) {
  double t = std::numeric_limits<double>::infinity();
  for (const auto& pipe : p.pipelines) t = std::min(t, pipe.latencyS);
  return t;
}

double slowestLatency(const plan::Plan& p) {
  double t = 0;
  for (const auto& pipe : p.pipelines) t = std::max(t, pipe.latencyS);
  return t;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(at);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

// Shoal against one baseline over a set of pools.
struct Comparison {
  std::vector<double> throughput, pureThroughput, latency, fastestRatio;
  int baselineInfeasible = 0, below1 = 0, below1Trades = 0;
  double worst = std::numeric_limits<double>::infinity();
  std::string worstPool;

  void add(const std::string& pool, const plan::Plan& shoal, const plan::Plan& pure,
           const plan::Plan& base) {
    if (!shoal.feasible) return;
    if (!base.feasible || base.throughputTokS <= 0) {
      ++baselineInfeasible;
      return;
    }
    const double r = shoal.throughputTokS / base.throughputTokS;
    throughput.push_back(r);
    pureThroughput.push_back(pure.throughputTokS / base.throughputTokS);
    latency.push_back(slowestLatency(base) / slowestLatency(shoal));
    fastestRatio.push_back(fastestLatency(base) / fastestLatency(shoal));
    if (r < 1 - 1e-9) {
      ++below1;
      if (r >= 0.99 - 1e-9 && slowestLatency(shoal) < slowestLatency(base)) ++below1Trades;
    }
    if (r < worst) {
      worst = r;
      worstPool = pool;
    }
  }

  Json json() const {
    Json j;
    j["pools_compared"] = throughput.size();
    j["median_throughput_ratio"] = quantile(throughput, 0.5);
    j["p10_throughput_ratio"] = quantile(throughput, 0.1);
    j["worst_throughput_ratio"] = quantile(throughput, 0);
    j["below_1"] = below1;
    j["below_1_latency_trades"] = below1Trades;
    j["median_throughput_ratio_pure_x"] = quantile(pureThroughput, 0.5);
    j["worst_throughput_ratio_pure_x"] = quantile(pureThroughput, 0);
    j["median_latency_ratio"] = quantile(latency, 0.5);
    j["worst_latency_ratio"] = quantile(latency, 0);
    j["median_fastest_latency_ratio"] = quantile(fastestRatio, 0.5);
    j["worst_fastest_latency_ratio"] = quantile(fastestRatio, 0);
    j["baseline_infeasible"] = baselineInfeasible;
    if (!worstPool.empty()) j["worst_pool"] = worstPool;
    return j;
  }
};

const char* kBaselines[] = {"equal_split", "memory_proportional_exo",
                            "memory_proportional_llamacpp", "parallax"};

// The single chat (sequences = 1, Shoal limited to one pipeline, the home default): the
// baseline's fastest pipeline against Shoal's one pipeline, in time per token.
struct SingleChat {
  std::vector<double> ratio[4];
  Json json() const {
    Json j;
    for (int b = 0; b < 4; ++b) {
      j["vs_" + std::string(kBaselines[b])] = {{"pools_compared", ratio[b].size()},
                                               {"median_latency_ratio", quantile(ratio[b], 0.5)},
                                               {"worst_latency_ratio", quantile(ratio[b], 0)}};
    }
    return j;
  }
};

struct Group {
  Comparison vs[4];
  SingleChat single;
  int pools = 0, shoalFeasible = 0, parallaxDp = 0;
  std::vector<double> shoalMs, parallaxMs;

  Json json() const {
    Json j;
    j["pools"] = pools;
    j["shoal_feasible"] = shoalFeasible;
    for (int b = 0; b < 4; ++b) j["vs_" + std::string(kBaselines[b])] = vs[b].json();
    j["single_chat"] = single.json();
    j["parallax_used_dp"] = parallaxDp;
    return j;
  }
};

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void runScenario(const plan_sim::Scenario& s, std::initializer_list<Group*> groups,
                 const Options& opt) {
  const plan::Pool& pool = s.file.pool;
  const plan::ModelCost& model = *s.file.model;
  const plan::Request& req = s.file.request;
  auto t0 = std::chrono::steady_clock::now();
  const plan::Plan shoal = plan::plan(pool, model, req);
  const double shoalMs = msSince(t0);
  plan::PlanOptions pureX;
  pureX.latencyTolerance = 0;
  const plan::Plan pure = plan::plan(pool, model, req, pureX);
  plan::PlanOptions oneChat;
  oneChat.maxPipelines = 1;
  const plan::Plan single =
      req.sequences == 1 ? plan::plan(pool, model, req, oneChat) : plan::Plan{};
  plan_sim::ParallaxStats pstats;
  t0 = std::chrono::steady_clock::now();
  const plan::Plan parallax = plan_sim::parallaxPlan(pool, model, req, &pstats);
  const double parallaxMs = msSince(t0);
  const plan::Plan bases[4] = {plan_sim::equalSplit(pool, model, req),
                               plan_sim::exoMemorySplit(pool, model, req),
                               plan_sim::llamaCppMemorySplit(pool, model, req), parallax};
  for (Group* g : groups) {
    ++g->pools;
    g->shoalFeasible += shoal.feasible;
    g->parallaxDp += pstats.usedDp;
    g->shoalMs.push_back(shoalMs);
    g->parallaxMs.push_back(parallaxMs);
    for (int b = 0; b < 4; ++b) {
      g->vs[b].add(s.name, shoal, pure, bases[b]);
      if (single.feasible && bases[b].feasible) {
        g->single.ratio[b].push_back(fastestLatency(bases[b]) / fastestLatency(single));
      }
    }
  }
  if (!opt.writePools.empty()) {
    std::string file = s.name.substr(0, s.name.find(' ')) + ".json";
    std::ofstream(std::filesystem::path(opt.writePools) / file)
        << plan::writePoolFile(s.file) << "\n";
  }
}

std::vector<int> parseSizes(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoi(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--home-labs")
      opt.homeLabs = std::stoi(value());
    else if (a == "--per-size")
      opt.perSize = std::stoi(value());
    else if (a == "--sizes")
      opt.sizes = parseSizes(value());
    else if (a == "--seed")
      opt.seed = std::stoull(value());
    else if (a == "--write-pools")
      opt.writePools = value();
    else {
      std::fprintf(stderr,
                   "usage: shoal_plan_sim [--home-labs N] [--per-size N] [--sizes 8,16,...] "
                   "[--seed S] [--write-pools DIR]\n");
      return 2;
    }
  }
  if (!opt.writePools.empty()) std::filesystem::create_directories(opt.writePools);

  plan_sim::Rng rng(opt.seed);
  Group home, homeHetero;
  for (int i = 0; i < opt.homeLabs; ++i) {
    const plan_sim::Scenario s = plan_sim::homeLab(rng, i);
    if (s.heterogeneous)
      runScenario(s, {&home, &homeHetero}, opt);
    else
      runScenario(s, {&home}, opt);
  }

  Json out;
  out["command"] = "shoal_plan_sim --home-labs " + std::to_string(opt.homeLabs) + " --per-size " +
                   std::to_string(opt.perSize) + " --seed " + std::to_string(opt.seed);
  out["home_lab_all"] = home.json();
  out["home_lab_heterogeneous"] = homeHetero.json();

  Json volunteer = Json::object();
  Json planTime = Json::object();
  for (int size : opt.sizes) {
    Group g;
    for (int i = 0; i < opt.perSize; ++i) runScenario(plan_sim::volunteer(rng, size, i), {&g}, opt);
    volunteer[std::to_string(size)] = g.json();
    planTime[std::to_string(size)] = {{"shoal_median_ms", quantile(g.shoalMs, 0.5)},
                                      {"shoal_max_ms", quantile(g.shoalMs, 1)},
                                      {"parallax_median_ms", quantile(g.parallaxMs, 0.5)}};
  }
  out["volunteer"] = volunteer;
  out["plan_time_ms"] = planTime;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
