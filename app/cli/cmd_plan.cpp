// shoal-cli plan: place a model on a pool of devices (engine/plan) and print the plan.
//
//   shoal-cli plan --pool FILE [--model GGUF] [--json] [--max-pipelines N]
//
// The pool file (format in engine/plan/pool_file.h) lists devices, links and the request; its
// "model" block may be left out when --model gives a GGUF file, whose metadata then supplies
// the layer costs (engine/plan/model_cost.h). Exit codes: 0 a plan, 1 the model does not fit
// (the plan says how much memory is missing), 2 bad input.

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>

#include "app/cli/commands.h"
#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/plan/cost_model.h"
#include "engine/plan/model_cost.h"
#include "engine/plan/plan_json.h"
#include "engine/plan/planner.h"
#include "engine/plan/pool_file.h"

namespace shoal::cli {
namespace {

struct PlanOptions {
  std::string pool;
  std::string model;
  bool json = false;
  int maxPipelines = 0;
};

std::string readText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CliExit{2, std::string("cannot open pool file ").append(path)};
  std::ostringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) throw CliExit{2, std::string("cannot read pool file ").append(path)};
  return text.str();
}

std::string bytesText(double bytes) {
  char buf[32];
  if (bytes >= 1e9)
    std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.0f MB", bytes / 1e6);
  return buf;
}

void printHuman(const plan::PoolFile& file, const plan::ModelCost& model, const plan::Plan& p,
                double planMs) {
  std::set<std::string> nodes;
  for (const auto& d : file.pool.devices) nodes.insert(d.node);
  std::printf(
      "Pool: %zu devices on %zu nodes; model: %d layers, %s of weights; %lld sequence(s) x "
      "%lld tokens\n",
      file.pool.devices.size(), nodes.size(), model.layers,
      bytesText(plan::rangeCost(model, file.request, 0, model.layers).weightBytes +
                model.embedBytes + model.headBytes)
          .c_str(),
      static_cast<long long>(file.request.sequences),
      static_cast<long long>(file.request.contextTokens));
  if (!p.feasible) {
    std::printf("No plan: %s\n", p.infeasibleReason.c_str());
    return;
  }
  std::printf("Plan: %zu pipeline(s), %.1f tokens/s in total (planned in %.1f ms)\n",
              p.pipelines.size(), p.throughputTokS, planMs);
  for (size_t i = 0; i < p.pipelines.size(); ++i) {
    const plan::Pipeline& pipe = p.pipelines[i];
    std::printf("\nPipeline %zu: %.1f tokens/s, %.1f ms per token\n", i + 1, pipe.throughputTokS,
                pipe.latencyS * 1e3);
    std::printf("  %-24s %-12s %10s %10s\n", "device", "layers", "memory", "stage");
    for (size_t s = 0; s < pipe.stages.size(); ++s) {
      const plan::StageAssignment& st = pipe.stages[s];
      const bool first = s == 0, last = s + 1 == pipe.stages.size();
      char range[48];
      std::snprintf(range, sizeof range, "[%d, %d)", st.firstLayer, st.lastLayer);
      const double memory = plan::stageMemoryBytes(model, file.request, st.firstLayer,
                                                   st.lastLayer - st.firstLayer, first, last);
      std::printf("  %-24s %-12s %10s %8.2f ms%s%s\n", st.deviceId.c_str(), range,
                  bytesText(memory).c_str(), st.stageS * 1e3, first ? "  + embedding" : "",
                  last ? "  + head" : "");
    }
  }
  if (!p.unusedDevices.empty()) {
    std::printf("\nUnused (would slow the pipelines down):");
    for (const auto& id : p.unusedDevices) std::printf(" %s", id.c_str());
    std::printf("\n");
  }
}

void runPlan(const PlanOptions& opt) {
  plan::PoolFile file;
  try {
    file = plan::parsePoolFile(readText(opt.pool), opt.model.empty());
  } catch (const Error& e) {
    throw CliExit{2, opt.pool + ": " + e.what()};
  }
  if (!opt.model.empty()) {
    try {
      const gguf::File gguf = gguf::File::open(opt.model);
      file.model = plan::modelCostFromGguf(gguf, file.request.contextTokens);
    } catch (const Error& e) {
      throw CliExit{2, e.what()};
    }
  }
  plan::Plan result;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    plan::PlanOptions options;
    options.maxPipelines = opt.maxPipelines;
    result = plan::plan(file.pool, *file.model, file.request, options);
  } catch (const Error& e) {
    throw CliExit{2, opt.pool + ": " + e.what()};
  }
  const double planMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (opt.json) {
    std::printf("%s\n", plan::planToJson(result, planMs).c_str());
  } else {
    printHuman(file, *file.model, result, planMs);
  }
  if (!result.feasible) {
    throw CliExit{1,
                  std::string("the model does not fit the pool: ").append(result.infeasibleReason)};
  }
}

}  // namespace

void registerPlanCommand(CLI::App& app) {
  auto opt = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Plan how a pool of devices runs a model: pipelines, their devices and layer ranges");
  cmd->add_option("--pool", opt->pool, "Pool file (JSON): devices, links, request, model costs")
      ->required();
  cmd->add_option(
      "--model", opt->model,
      "GGUF model whose metadata gives the layer costs (replaces the pool file's model)");
  cmd->add_flag("--json", opt->json, "Print the plan as JSON");
  cmd->add_option("--max-pipelines", opt->maxPipelines,
                  "At most this many pipelines (1: the fastest single chat; default: as many as "
                  "maximize throughput)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([opt]() { runPlan(*opt); });
}

}  // namespace shoal::cli
