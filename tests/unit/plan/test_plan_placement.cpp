// Phase 1 (placement): plans obey the rules, reach the exhaustive optimum on small pools, never
// lose throughput when a device joins, leave slow devices out, and say what is missing when
// nothing fits.

#include <QtTest>
#include <algorithm>
#include <random>

#include "engine/error.h"
#include "engine/plan/cost_model.h"
#include "engine/plan/planner.h"
#include "plan_test_pools.h"

using namespace shoal::plan;
using plan_test::Instance;

namespace {

Device device(const std::string& id, const std::string& node, double memory, double bandwidth,
              double flops) {
  return Device{id, node, memory, bandwidth, flops};
}

// A 32-layer model of ~4 GB: W = 100 MB, no KV, small embedding and head.
ModelCost smallModel() {
  ModelCost m;
  m.layers = 32;
  m.layerWeightBytes = 1e8;
  m.layerFlopsPerToken = 2e8;
  m.kvBytesPerTokenPerLayer = 0;
  m.hiddenBytesPerToken = 8192;
  m.embedBytes = 1e8;
  m.headBytes = 1e8;
  m.headFlopsPerToken = 2e8;
  return m;
}

bool samePlan(const Plan& a, const Plan& b) {
  if (a.pipelines.size() != b.pipelines.size() || a.unusedDevices != b.unusedDevices) return false;
  for (size_t p = 0; p < a.pipelines.size(); ++p) {
    const auto& sa = a.pipelines[p].stages;
    const auto& sb = b.pipelines[p].stages;
    if (sa.size() != sb.size()) return false;
    for (size_t i = 0; i < sa.size(); ++i) {
      if (sa[i].device != sb[i].device || sa[i].firstLayer != sb[i].firstLayer ||
          sa[i].lastLayer != sb[i].lastLayer) {
        return false;
      }
    }
  }
  return a.throughputTokS == b.throughputTokS;
}

}  // namespace

class PlanPlacementTest : public QObject {
  Q_OBJECT

 private slots:
  void everyPlanSatisfiesTheConstraints() {
    std::mt19937_64 rng(1);
    int feasible = 0;
    for (int t = 0; t < 300; ++t) {
      const int devices = std::uniform_int_distribution<int>(1, 14)(rng);
      const int layers = std::uniform_int_distribution<int>(1, 48)(rng);
      const Instance in = plan_test::randomInstance(rng, devices, layers);
      const Plan p = plan(in.pool, in.model, in.request);
      const auto violations = planViolations(in.pool, in.model, in.request, p);
      QVERIFY2(violations.empty(), violations.empty() ? "" : violations.front().c_str());
      QCOMPARE(p.feasible, !p.pipelines.empty());
      // Reported numbers are the cost model's.
      Plan again = p;
      evaluatePlan(in.pool, in.model, in.request, again);
      QVERIFY(std::abs(again.throughputTokS - p.throughputTokS) <= 1e-9 * p.throughputTokS);
      // Every device is either in exactly one stage or listed unused.
      size_t used = 0;
      for (const auto& pipe : p.pipelines) used += pipe.stages.size();
      QCOMPARE(used + p.unusedDevices.size(), in.pool.devices.size());
      feasible += p.feasible;
    }
    QVERIFY(feasible > 100);  // the generator must exercise real plans
  }

  void reachesTheExhaustiveOptimumOnSmallPools() {
    std::mt19937_64 rng(2);
    double worstExact = 2, worstHeuristic = 2;
    int compared = 0;
    for (int t = 0; t < 150; ++t) {
      const int devices = std::uniform_int_distribution<int>(1, 5)(rng);
      const int layers = std::uniform_int_distribution<int>(1, 32)(rng);
      const Instance in = plan_test::randomInstance(rng, devices, layers);
      double bestSingle = 0;
      const double optimum = plan_test::exhaustiveBestThroughput(in, &bestSingle);
      PlanOptions single;
      single.maxPipelines = 1;
      single.latencyTolerance = 0;
      const Plan one = plan(in.pool, in.model, in.request, single);
      QVERIFY(one.pipelines.size() <= 1);
      QVERIFY(std::abs(one.throughputTokS - bestSingle) <= 1e-9 * bestSingle);
      PlanOptions pure;
      pure.latencyTolerance = 0;
      const Plan exact = plan(in.pool, in.model, in.request, pure);
      PlanOptions heuristic = pure;
      heuristic.exactDeviceLimit = 0;  // force the large-pool search onto the same pools
      const Plan approx = plan(in.pool, in.model, in.request, heuristic);
      if (optimum == 0) {
        QVERIFY(!exact.feasible);
        QVERIFY(!approx.feasible);
        continue;
      }
      ++compared;
      worstExact = std::min(worstExact, exact.throughputTokS / optimum);
      worstHeuristic = std::min(worstHeuristic, approx.throughputTokS / optimum);
      QVERIFY(exact.throughputTokS <= optimum * (1 + 1e-9));
    }
    qInfo(
        "exhaustive check on %d feasible pools (<= 5 devices, <= 32 layers): worst X/optimum "
        "%.6f (exact search), %.6f (large-pool search)",
        compared, worstExact, worstHeuristic);
    QVERIFY(compared > 50);
    QVERIFY(worstExact >= 0.98);
    QVERIFY(worstHeuristic >= 0.98);
  }

  void addingADeviceNeverLowersThroughput() {
    std::mt19937_64 rng(3);
    PlanOptions pure;
    pure.latencyTolerance = 0;
    double worst = 2;
    for (int t = 0; t < 1000; ++t) {
      const int devices = std::uniform_int_distribution<int>(1, 9)(rng);
      const int layers = std::uniform_int_distribution<int>(1, 40)(rng);
      Instance in = plan_test::randomInstance(rng, devices, layers);
      const Plan before = plan(in.pool, in.model, in.request, pure);
      in.pool.devices.push_back(plan_test::randomDevice(rng, in.model, devices, 3));
      // The new device may sit on a node the links do not name yet.
      in.pool.defaultLink = Link{plan_test::uniform(rng, 1e-4, 5e-3), 1e8};
      const Plan after = plan(in.pool, in.model, in.request, pure);
      if (before.throughputTokS > 0)
        worst = std::min(worst, after.throughputTokS / before.throughputTokS);
      QVERIFY2(after.throughputTokS >= before.throughputTokS * (1 - 1e-9),
               qPrintable(QString("pool %1: X %2 -> %3 after adding a device")
                              .arg(t)
                              .arg(before.throughputTokS)
                              .arg(after.throughputTokS)));
    }
    qInfo("1000 pools: worst X(with device) / X(without) = %.6f", worst);
  }

  void pipelineLimitIsRespectedOnLargerPools() {
    std::mt19937_64 rng(6);
    for (int t = 0; t < 30; ++t) {
      const Instance in =
          plan_test::randomInstance(rng, std::uniform_int_distribution<int>(8, 40)(rng),
                                    std::uniform_int_distribution<int>(8, 60)(rng));
      PlanOptions limited;
      limited.maxPipelines = 1 + t % 3;
      const Plan p = plan(in.pool, in.model, in.request, limited);
      QVERIFY(static_cast<int>(p.pipelines.size()) <= limited.maxPipelines);
      QVERIFY(planViolations(in.pool, in.model, in.request, p).empty());
      // A limit never helps, and a single pipeline exists whenever any plan does.
      const Plan free = plan(in.pool, in.model, in.request);
      QCOMPARE(p.feasible, free.feasible);
      QVERIFY(p.throughputTokS <= free.throughputTokS * (1 + 1e-9) / (1 - 0.01));
    }
  }

  void latencyTieBreakCostsAtMostTheTolerance() {
    std::mt19937_64 rng(4);
    for (int t = 0; t < 200; ++t) {
      const Instance in =
          plan_test::randomInstance(rng, std::uniform_int_distribution<int>(1, 10)(rng),
                                    std::uniform_int_distribution<int>(1, 40)(rng));
      PlanOptions pure;
      pure.latencyTolerance = 0;
      const Plan best = plan(in.pool, in.model, in.request, pure);
      const Plan chosen = plan(in.pool, in.model, in.request);
      QVERIFY(chosen.throughputTokS >= best.throughputTokS * (1 - 0.01) * (1 - 1e-9));
    }
  }

  void leavesOutADeviceThatWouldSlowThePipeline() {
    // One fast GPU holds the whole model; a slow CPU would only add a hop and slow layers.
    Pool pool;
    // The CPU cannot hold the model alone either, so it could only join the GPU's pipeline.
    pool.devices = {device("gpu", "pc", 24e9, 1e12, 1e14), device("cpu", "pc", 3e9, 5e10, 1e12)};
    const Plan p = plan(pool, smallModel(), Request{4096, 1});
    QVERIFY(p.feasible);
    QCOMPARE(p.pipelines.size(), size_t{1});
    QCOMPARE(p.pipelines[0].stages.size(), size_t{1});
    QCOMPARE(p.pipelines[0].stages[0].deviceId, std::string("gpu"));
    QCOMPARE(p.unusedDevices, std::vector<std::string>{"cpu"});
  }

  void fastestSingleChatUsesTheFastDevicesFirst() {
    // Two GPUs of 1.2 GB cannot hold the 3.4 GB model; with the CPU for the overflow they can.
    // The GPUs must get all they can hold: 12 layers in the middle, 11 beside the head; the CPU
    // (20x slower per layer) takes the embedding and the 9 layers left.
    Pool pool;
    pool.devices = {device("cpu", "pc", 64e9, 5e10, 1e12), device("gpu0", "pc", 1.2e9, 1e12, 1e14),
                    device("gpu1", "pc", 1.2e9, 1e12, 1e14)};
    const Plan p = plan(pool, smallModel(), Request{4096, 1});
    QVERIFY(p.feasible);
    QCOMPARE(p.pipelines.size(), size_t{1});
    int gpuLayers = 0, cpuLayers = 0;
    for (const auto& s : p.pipelines[0].stages) {
      (s.deviceId == "cpu" ? cpuLayers : gpuLayers) += s.lastLayer - s.firstLayer;
    }
    QCOMPARE(gpuLayers, 23);
    QCOMPARE(cpuLayers, 9);
    QCOMPARE(p.pipelines[0].stages.front().deviceId, std::string("cpu"));
  }

  void likeDevicesShareTheLayersEvenly() {
    // Three like devices, none of which holds more than 14 layers beside the embedding or the
    // head: every split of one chat over them has the same total time, and the one taken spreads
    // the layers (the slowest stage as fast as any split allows: 11/11/10 with the head's read
    // as heavy as a layer) rather than filling each device to its memory in turn. The same when
    // the model lists its (here alike) layers one by one, which takes the range split.
    Pool pool;
    for (const char* d : {"a", "b", "c"}) pool.devices.push_back(device(d, d, 1.55e9, 5e10, 1e12));
    pool.defaultLink = Link{1e-4, 1e8};
    ModelCost listed = smallModel();
    listed.perLayer.assign(32, LayerCost{1e8, 1e8, 2e8, 0, 0});
    for (const ModelCost& m : {smallModel(), listed}) {
      const Plan p = plan(pool, m, Request{4096, 1});
      QVERIFY(p.feasible);
      QCOMPARE(p.pipelines.size(), size_t{1});
      QCOMPARE(p.pipelines[0].stages.size(), size_t{3});
      const auto& st = p.pipelines[0].stages;
      QCOMPARE(st[0].lastLayer - st[0].firstLayer, 11);
      QCOMPARE(st[1].lastLayer - st[1].firstLayer, 11);
      QCOMPARE(st[2].lastLayer - st[2].firstLayer, 10);
    }
  }

  void buildsSeveralReplicasWhenThatServesMoreSequences() {
    // Four identical GPUs that each hold the model: four one-stage pipelines beat any chain.
    Pool pool;
    for (int i = 0; i < 4; ++i) {
      pool.devices.push_back(device(plan_test::numbered("gpu", i), "pc", 24e9, 1e12, 1e14));
    }
    const Plan p = plan(pool, smallModel(), Request{4096, 8});
    QCOMPARE(p.pipelines.size(), size_t{4});
    for (const auto& pipe : p.pipelines) QCOMPARE(pipe.stages.size(), size_t{1});
  }

  void reportsTheMissingMemoryWhenTheModelCannotFit() {
    Pool pool;
    pool.devices = {device("a", "pc", 1e9, 1e12, 1e14), device("b", "pc", 1e9, 1e12, 1e14)};
    const ModelCost m = smallModel();  // needs 32 × 100 MB + 200 MB = 3.4 GB
    const Plan p = plan(pool, m, Request{4096, 1});
    QVERIFY(!p.feasible);
    QVERIFY(p.pipelines.empty());
    QCOMPARE(p.missingBytes, 3.4e9 - 2e9);
    QVERIFY2(p.infeasibleReason.find("missing") != std::string::npos, p.infeasibleReason.c_str());
    QCOMPARE(p.unusedDevices.size(), size_t{2});
  }

  void reportsFragmentedMemoryAsMissingLayers() {
    // 4 GB in total but in pieces of 50 MB: not one 100 MB layer fits anywhere.
    Pool pool;
    for (int i = 0; i < 80; ++i)
      pool.devices.push_back(device(plan_test::numbered("d", i), "pc", 5e7, 1e12, 1e14));
    const Plan p = plan(pool, smallModel(), Request{4096, 1});
    QVERIFY(!p.feasible);
    QCOMPARE(p.missingBytes, 32 * 1e8);
    QVERIFY2(p.infeasibleReason.find("0 of 32 layers") != std::string::npos,
             p.infeasibleReason.c_str());
  }

  void kvCacheCountsAgainstMemory() {
    // 24 GB holds 32 layers of 100 MB, but not with 16 sequences × 8192 tokens × 64 KB of KV.
    Pool pool;
    pool.devices = {device("gpu", "pc", 24e9, 1e12, 1e14)};
    ModelCost m = smallModel();
    m.kvBytesPerTokenPerLayer = 65536;
    QVERIFY(plan(pool, m, Request{8192, 1}).feasible);
    const Plan p = plan(pool, m, Request{8192, 16});
    QVERIFY(!p.feasible);
    QVERIFY(p.missingBytes > 0);
  }

  void plansWithDifferingLayersReachTheExhaustiveOptimum() {
    // Layers of their own weights, reads, FLOPs, KV and windows: the range split (a DP over the
    // boundaries) and both searches against the reference that tries every split.
    std::mt19937_64 rng(7);
    double worstExact = 2, worstHeuristic = 2;
    int compared = 0;
    for (int t = 0; t < 150; ++t) {
      const int devices = std::uniform_int_distribution<int>(1, 5)(rng);
      const int layers = std::uniform_int_distribution<int>(1, 24)(rng);
      Instance in = plan_test::randomInstance(rng, devices, layers);
      plan_test::varyLayers(rng, in);
      double bestSingle = 0;
      const double optimum = plan_test::exhaustiveBestThroughput(in, &bestSingle);
      PlanOptions single;
      single.maxPipelines = 1;
      single.latencyTolerance = 0;
      const Plan one = plan(in.pool, in.model, in.request, single);
      QVERIFY(planViolations(in.pool, in.model, in.request, one).empty());
      // G* is found to a relative 1e-9.
      QVERIFY2(std::abs(one.throughputTokS - bestSingle) <= 1e-8 * bestSingle,
               qPrintable(QString("pool %1: X %2, best single %3")
                              .arg(t)
                              .arg(one.throughputTokS, 0, 'g', 17)
                              .arg(bestSingle, 0, 'g', 17)));
      PlanOptions pure;
      pure.latencyTolerance = 0;
      const Plan exact = plan(in.pool, in.model, in.request, pure);
      PlanOptions heuristic = pure;
      heuristic.exactDeviceLimit = 0;
      const Plan approx = plan(in.pool, in.model, in.request, heuristic);
      QVERIFY(planViolations(in.pool, in.model, in.request, exact).empty());
      QVERIFY(planViolations(in.pool, in.model, in.request, approx).empty());
      if (optimum == 0) {
        QVERIFY(!exact.feasible);
        QVERIFY(!approx.feasible);
        continue;
      }
      ++compared;
      worstExact = std::min(worstExact, exact.throughputTokS / optimum);
      worstHeuristic = std::min(worstHeuristic, approx.throughputTokS / optimum);
      QVERIFY(exact.throughputTokS <= optimum * (1 + 1e-9));
    }
    qInfo(
        "differing layers, %d feasible pools: worst X/optimum %.9f (exact search), %.6f "
        "(large-pool search)",
        compared, worstExact, worstHeuristic);
    QVERIFY(compared > 50);
    QVERIFY(worstExact >= 1 - 1e-8);
    QVERIFY(worstHeuristic >= 0.98);
  }

  void plansWithDifferingLayersSatisfyTheConstraints() {
    std::mt19937_64 rng(8);
    int feasible = 0;
    for (int t = 0; t < 60; ++t) {
      // Up to 40 devices: the large-pool search (above 24) too.
      const int devices = t % 10 == 9 ? 40 : std::uniform_int_distribution<int>(1, 12)(rng);
      Instance in =
          plan_test::randomInstance(rng, devices, std::uniform_int_distribution<int>(1, 48)(rng));
      plan_test::varyLayers(rng, in);
      const Plan p = plan(in.pool, in.model, in.request);
      const auto violations = planViolations(in.pool, in.model, in.request, p);
      QVERIFY2(violations.empty(), violations.empty() ? "" : violations.front().c_str());
      Plan again = p;
      evaluatePlan(in.pool, in.model, in.request, again);
      QCOMPARE(again.throughputTokS, p.throughputTokS);
      feasible += p.feasible;
    }
    QVERIFY(feasible > 20);
  }

  void slidingWindowLayersNeedOnlyTheirWindowOfKv() {
    // 8 layers of 100 MB; 10 kB of KV per position at 65536 tokens is 655 MB per full layer,
    // but layers 0-3 attend over a window of 1024 positions: 10 MB each. A 500 MB GPU holds the
    // four windowed layers (with the embedding) and not one full layer; the 3.1 GB one holds the
    // four full layers (with the head) and not the whole model. Only that split fits.
    ModelCost m;
    m.layers = 8;
    for (int l = 0; l < 8; ++l) m.perLayer.push_back({1e8, 1e8, 2e8, 1e4, l < 4 ? 1024 : 0});
    m.layerWeightBytes = 1e8;
    m.layerFlopsPerToken = 2e8;
    m.kvBytesPerTokenPerLayer = 1e4;
    m.hiddenBytesPerToken = 8192;
    m.embedBytes = 1e7;
    m.headBytes = 1e7;
    m.headFlopsPerToken = 2e7;
    const Request r{65536, 1};
    QCOMPARE(stageMemoryBytes(m, r, 0, 4, true, false), 4 * (1e8 + 1024 * 1e4) + 1e7);
    QCOMPARE(stageMemoryBytes(m, r, 4, 4, false, true), 4 * (1e8 + 65536 * 1e4) + 1e7);
    Pool pool;
    pool.devices = {device("big", "pc", 3.1e9, 1e12, 1e14), device("small", "pc", 5e8, 1e12, 1e14)};
    QCOMPARE(layerCapacity(pool.devices[1], m, r, true, false), 4);
    QCOMPARE(layerCapacity(pool.devices[1], m, r, false, true), 0);
    const Plan p = plan(pool, m, r);
    QVERIFY2(p.feasible, p.infeasibleReason.c_str());
    QVERIFY(planViolations(pool, m, r, p).empty());
    QCOMPARE(p.pipelines.size(), size_t{1});
    const auto& stages = p.pipelines[0].stages;
    QCOMPARE(stages.size(), size_t{2});
    QCOMPARE(stages[0].deviceId, std::string("small"));
    QCOMPARE(stages[0].lastLayer, 4);
    QCOMPARE(stages[1].deviceId, std::string("big"));
    // Without the windows every layer caches the whole context: nothing fits.
    for (LayerCost& c : m.perLayer) c.window = 0;
    QVERIFY(!plan(pool, m, r).feasible);
  }

  void aHeavierLayerMovesTheSplit() {
    // Layer 0 is three times as heavy as each of the three others (3 + 1 + 1 + 1 ms on these
    // GPUs): with 16 sequences the slowest stage sets X, and the balanced split is [0, 1) | [1, 4)
    // at 3 ms each, where a split by layer count (2 | 2) would take 4 ms for its first stage.
    ModelCost m;
    m.layers = 4;
    m.perLayer = {
        {3e8, 3e8, 6e8, 0, 0}, {1e8, 1e8, 2e8, 0, 0}, {1e8, 1e8, 2e8, 0, 0}, {1e8, 1e8, 2e8, 0, 0}};
    m.layerWeightBytes = 1.5e8;
    m.layerFlopsPerToken = 3e8;
    m.hiddenBytesPerToken = 8192;
    Pool pool;
    pool.devices = {device("a", "pc", 1e10, 1e11, 1e14), device("b", "pc", 1e10, 1e11, 1e14)};
    pool.intraNode = Link{1e-6, 1e11};
    PlanOptions onePipeline;
    onePipeline.maxPipelines = 1;
    const Plan p = plan(pool, m, Request{0, 16}, onePipeline);
    QVERIFY(p.feasible);
    const auto& stages = p.pipelines.at(0).stages;
    QCOMPARE(stages.size(), size_t{2});
    QCOMPARE(stages[0].firstLayer, 0);
    QCOMPARE(stages[0].lastLayer, 1);
    QVERIFY(qFuzzyCompare(stages[0].stageS, 3e-3));
    QVERIFY(qFuzzyCompare(stages[1].stageS, 3e-3));
    QVERIFY(qFuzzyCompare(p.throughputTokS, 1 / 3e-3));
  }

  void isDeterministic() {
    std::mt19937_64 rng(5);
    for (int t = 0; t < 12; ++t) {
      const Instance in =
          plan_test::randomInstance(rng, std::uniform_int_distribution<int>(1, 40)(rng), 40);
      QVERIFY(samePlan(plan(in.pool, in.model, in.request), plan(in.pool, in.model, in.request)));
    }
  }

  void rejectsInputsOutOfRange() {
    Pool pool;
    pool.devices = {device("gpu", "pc", 24e9, 0, 1e14)};
    try {
      plan(pool, smallModel(), Request{});
      QFAIL("expected an error");
    } catch (const shoal::Error& e) {
      QVERIFY2(std::string(e.what()).find("devices[0].bandwidth_bytes_per_s") != std::string::npos,
               e.what());
    }
    ModelCost m = smallModel();
    m.layers = 0;
    pool.devices[0].bandwidthBytesPerS = 1e12;
    QVERIFY_THROWS_EXCEPTION(shoal::Error, plan(pool, m, Request{}));
  }
};

QTEST_GUILESS_MAIN(PlanPlacementTest)
#include "test_plan_placement.moc"
