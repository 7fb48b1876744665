// Phase 2 (routing): on hand-built stage DAGs, the router picks the chain with the least
// expected latency, mixes replicas where their ranges join, and never uses an overloaded stage.

#include <QtTest>

#include "engine/plan/planner.h"
#include "engine/plan/routing.h"

using namespace shoal::plan;

namespace {

// Six devices on three nodes; hops between nodes cost 0.010 s + A / bandwidth = 0.011 s,
// inside a node 0.001 s + 0.0001 s. Token return between nodes: 0.010 s.
Pool pool() {
  Pool p;
  for (int i = 0; i < 6; ++i) {
    std::string id = "d", node = "n";
    id += std::to_string(i);
    node += std::to_string(i / 2);
    p.devices.push_back(Device{id, node, 1e12, 1e12, 1e15});
  }
  p.intraNode = Link{0.001, 1e7};
  p.defaultLink = Link{0.010, 1e6};
  return p;
}

ModelCost model() {
  ModelCost m;
  m.layers = 20;
  m.hiddenBytesPerToken = 1000;
  return m;
}

RoutableStage stage(int device, int first, int last, double seconds, int queue = 0,
                    int kvSlots = 4) {
  RoutableStage s;
  s.device = device;
  s.firstLayer = first;
  s.lastLayer = last;
  s.secondsPerToken = seconds;
  s.queueDepth = queue;
  s.kvSlots = kvSlots;
  return s;
}

}  // namespace

class PlanRoutingTest : public QObject {
  Q_OBJECT

 private slots:
  void picksTheCheapestOfTwoReplicas() {
    // Replica A: d0 [0,10) → d1 [10,20) on node n0; replica B: d2 → d3 on n1, slower.
    const std::vector<RoutableStage> stages{stage(0, 0, 10, 0.020), stage(1, 10, 20, 0.020),
                                            stage(2, 0, 10, 0.030), stage(3, 10, 20, 0.030)};
    const Route r = route(pool(), model(), stages);
    QVERIFY(r.found);
    QCOMPARE(r.stages, (std::vector<size_t>{0, 1}));
    QVERIFY(qFuzzyCompare(r.expectedLatencyS, 0.020 + 0.0011 + 0.020));
  }

  void mixesReplicasWhereTheirRangesJoin() {
    // d0's second half is loaded (queue 2 of 4: cost × 1.5); d3 on another node is free.
    // Chains: 0→1: 0.020 + 0.0011 + 0.030 = 0.0511; 0→3: 0.020 + 0.011 + 0.020 + return 0.010
    // = 0.061; 2→3: 0.025 + 0.0011 + 0.020 = 0.0461 (all on n1). Cheapest: 2→3.
    std::vector<RoutableStage> stages{stage(0, 0, 10, 0.020), stage(1, 10, 20, 0.020, 2),
                                      stage(2, 0, 10, 0.025), stage(3, 10, 20, 0.020)};
    Route r = route(pool(), model(), stages);
    QCOMPARE(r.stages, (std::vector<size_t>{2, 3}));
    // Make d2 expensive: now d0 → d3 across nodes (0.061) beats 0→1 (0.0511)? No: 0→1 wins.
    stages[2].secondsPerToken = 0.100;
    r = route(pool(), model(), stages);
    QCOMPARE(r.stages, (std::vector<size_t>{0, 1}));
    // Load d1 further (queue 3 of 4: 0.020 × 1.75 = 0.035): 0→1 = 0.0561 still beats 0→3 = 0.061.
    stages[1].queueDepth = 3;
    r = route(pool(), model(), stages);
    QCOMPARE(r.stages, (std::vector<size_t>{0, 1}));
    // Slow d1's measurement to 0.040 (× 1.75 = 0.070): the mixed chain 0 → 3 wins.
    stages[1].secondsPerToken = 0.040;
    r = route(pool(), model(), stages);
    QCOMPARE(r.stages, (std::vector<size_t>{0, 3}));
    QVERIFY(qFuzzyCompare(r.expectedLatencyS, 0.020 + 0.011 + 0.020 + 0.010));
  }

  void neverUsesAnOverloadedStage() {
    // The cheapest chain's second stage is full (queue = slots): the route goes around it,
    // 0 → 3 across nodes (0.001 + 0.011 + 0.050 + 0.010 = 0.072) rather than 2 → 3 (0.1011).
    const std::vector<RoutableStage> stages{stage(0, 0, 10, 0.001), stage(1, 10, 20, 0.001, 4, 4),
                                            stage(2, 0, 10, 0.050), stage(3, 10, 20, 0.050)};
    const Route r = route(pool(), model(), stages);
    QVERIFY(r.found);
    QCOMPARE(r.stages, (std::vector<size_t>{0, 3}));
    QVERIFY(qFuzzyCompare(r.expectedLatencyS, 0.072));
  }

  void findsNoRouteWhenEveryChainIsOverloaded() {
    const std::vector<RoutableStage> stages{stage(0, 0, 10, 0.01), stage(1, 10, 20, 0.01, 4, 4),
                                            stage(3, 10, 20, 0.01, 9, 4)};
    QVERIFY(!route(pool(), model(), stages).found);
  }

  void onlyJoinsStagesWhoseRangesMeet() {
    // [0,10) cannot continue with [12,20); [0,12) can. A three-stage chain through a narrow
    // middle stage also counts.
    const std::vector<RoutableStage> stages{stage(0, 0, 10, 0.001), stage(1, 12, 20, 0.001),
                                            stage(2, 0, 12, 0.030), stage(4, 10, 12, 0.002)};
    const Route r = route(pool(), model(), stages);
    QVERIFY(r.found);
    // 0 → 4 → 1: 0.001 + 0.011 + 0.002 + 0.011 + 0.001 + return(n0 ← n0)... d1 is on n0: the
    // return is free; total 0.026 < 2 → 1: 0.030 + 0.011 + 0.001 + 0.010 = 0.052.
    QCOMPARE(r.stages, (std::vector<size_t>{0, 3, 1}));
    QVERIFY(qFuzzyCompare(r.expectedLatencyS, 0.001 + 0.011 + 0.002 + 0.011 + 0.001));
  }

  void routesAFreshPlanAlongOneOfItsPipelines() {
    Pool p;
    p.devices = {Device{"a", "n", 2.2e9, 1e12, 1e14}, Device{"b", "n", 2.2e9, 1e12, 1e14},
                 Device{"c", "m", 2.2e9, 5e11, 1e14}, Device{"d", "m", 2.2e9, 5e11, 1e14}};
    p.defaultLink = Link{1e-3, 1e8};
    ModelCost m;
    m.layers = 32;
    m.layerWeightBytes = 1e8;
    m.layerFlopsPerToken = 2e8;
    m.hiddenBytesPerToken = 8192;
    const Request req{1024, 4};
    const Plan plan = shoal::plan::plan(p, m, req);
    QVERIFY(plan.feasible);
    const std::vector<RoutableStage> stages = routableStages(plan, req);
    const Route r = route(p, m, stages);
    QVERIFY(r.found);
    QCOMPARE(stages[r.stages.front()].firstLayer, 0);
    QCOMPARE(stages[r.stages.back()].lastLayer, 32);
  }

  // Whole replicas (the runtime's routing): the cheaper one under load, a full one only when
  // every one is full, and malformed ones never.
  void chooseReplicaWeighsEachReplicaByItsLoad() {
    // A: d0 → d1 inside n0, 0.020 + 0.0011 + 0.020 + a return inside n0;
    // B: d2 → d4 across nodes, 0.022 + 0.011 + 0.022 + a 0.010 return = 0.065.
    std::vector<std::vector<RoutableStage>> replicas{
        {stage(0, 0, 10, 0.020), stage(1, 10, 20, 0.020)},
        {stage(2, 0, 10, 0.022), stage(4, 10, 20, 0.022)}};
    QCOMPARE(chooseReplica(pool(), model(), replicas), 0);
    // Three of A's four slots taken: 0.040 × 1.75 + 0.0011 > 0.065.
    for (RoutableStage& s : replicas[0]) s.queueDepth = 3;
    QCOMPARE(chooseReplica(pool(), model(), replicas), 1);
    // B full (depth = slots): A wins while it has room, whatever its stretch.
    for (RoutableStage& s : replicas[1]) s.queueDepth = 4;
    QCOMPARE(chooseReplica(pool(), model(), replicas), 0);
    // Both full: the one whose whole queue costs least. A: 0.040 × (1 + 9/4) + 0.0011 > 0.13;
    // B: 0.044 × 2 + 0.021 = 0.109.
    for (RoutableStage& s : replicas[0]) s.queueDepth = 9;
    QCOMPARE(chooseReplica(pool(), model(), replicas), 1);
  }

  void chooseReplicaSkipsMalformedReplicas() {
    const std::vector<std::vector<RoutableStage>> replicas{
        {},                                                       // none
        {stage(0, 0, 10, 0.001), stage(1, 12, 20, 0.001)},        // a gap
        {stage(0, 0, 10, 0.001)},                                 // stops short of layer 20
        {stage(9, 0, 20, 0.001)},                                 // no such device
        {stage(2, 0, 10, 0.030), stage(3, 10, 20, 0.030, 7, 2)},  // full, but well formed
    };
    QCOMPARE(chooseReplica(pool(), model(), replicas), 4);
    QCOMPARE(chooseReplica(pool(), model(), std::span(replicas).first(4)), -1);
  }
};

QTEST_GUILESS_MAIN(PlanRoutingTest)
#include "test_plan_routing.moc"
