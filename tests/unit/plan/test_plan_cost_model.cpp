// The cost model's formulas on hand-computed examples, and the rule checker.

#include <QtTest>

#include "engine/error.h"
#include "engine/plan/cost_model.h"

using namespace shoal::plan;

namespace {

ModelCost model() {
  ModelCost m;
  m.layers = 10;
  m.layerWeightBytes = 1000;
  m.layerFlopsPerToken = 4000;
  m.kvBytesPerTokenPerLayer = 2;
  m.hiddenBytesPerToken = 100;
  m.embedBytes = 300;
  m.headBytes = 500;
  m.headFlopsPerToken = 9000;
  return m;
}

// a and b on node n1, c on node n2.
Pool pool() {
  Pool p;
  p.devices = {Device{"a", "n1", 1e6, 1000, 1000}, Device{"b", "n1", 1e6, 500, 8000},
               Device{"c", "n2", 6000, 2000, 2000}};
  p.intraNode = Link{0.001, 1000};
  p.links = {NodeLink{"n1", "n2", Link{0.5, 100}}};
  return p;
}

StageAssignment stage(int device, int first, int last) {
  StageAssignment s;
  s.device = device;
  s.firstLayer = first;
  s.lastLayer = last;
  return s;
}

}  // namespace

class PlanCostModelTest : public QObject {
  Q_OBJECT

 private slots:
  void stageMemoryCountsWeightsKvEmbeddingAndHead() {
    const Request r{50, 3};  // KV: 50 × 3 × 2 = 300 bytes per layer
    QCOMPARE(perLayerBytes(model(), r), 1300.0);
    QCOMPARE(stageMemoryBytes(model(), r, 0, 4, false, false), 5200.0);
    QCOMPARE(stageMemoryBytes(model(), r, 0, 4, true, false), 5500.0);
    QCOMPARE(stageMemoryBytes(model(), r, 0, 4, true, true), 6000.0);
  }

  void stageTimeIsTheSlowerOfMemoryAndCompute() {
    const Device a{"a", "n", 0, 1000, 1000};
    // 3 layers: bytes 3000 / 1000 = 3 s, flops 12000 / 1000 = 12 s.
    QCOMPARE(stageTimeS(a, model(), 0, 3, false), 12.0);
    const Device b{"b", "n", 0, 500, 8000};
    // bytes 3000 / 500 = 6 s, flops 12000 / 8000 = 1.5 s.
    QCOMPARE(stageTimeS(b, model(), 0, 3, false), 6.0);
    // With the head: bytes 3500 / 500 = 7 s, flops 21000 / 8000 = 2.625 s.
    QCOMPARE(stageTimeS(b, model(), 0, 3, true), 7.0);
  }

  void layerCapacityMatchesTheMemoryRule() {
    const Request r{0, 1};
    const Device c{"c", "n", 6000, 1, 1};
    QCOMPARE(layerCapacity(c, model(), r, false, false), 6);
    QCOMPARE(layerCapacity(c, model(), r, true, false), 5);  // 6000 - 300 = 5700
    QCOMPARE(layerCapacity(c, model(), r, true, true), 5);   // 6000 - 800 = 5200
    const Device tiny{"t", "n", 400, 1, 1};
    QCOMPARE(layerCapacity(tiny, model(), r, false, true), 0);  // the head alone does not fit
  }

  void differingLayersAreSummedOverTheirRange() {
    // Layer 1 is an MoE layer (reads a quarter of its weights per token), layer 2 attends over a
    // window of 20 positions, layer 3 is twice as heavy.
    ModelCost m = model();
    m.layers = 4;
    m.perLayer = {{1000, 1000, 4000, 2, 0},
                  {4000, 1000, 4000, 2, 0},
                  {1000, 1000, 4000, 2, 20},
                  {2000, 2000, 8000, 4, 0}};
    const Request r{50, 3};
    // Resident: W_l + 3 sequences × min(50, w_l) × K_l.
    QCOMPARE(rangeCost(m, r, 0, 1).residentBytes, 1000.0 + 3 * 50 * 2);
    QCOMPARE(rangeCost(m, r, 2, 1).residentBytes, 1000.0 + 3 * 20 * 2);
    QCOMPARE(rangeCost(m, Request{10, 3}, 2, 1).residentBytes, 1000.0 + 3 * 10 * 2);
    QCOMPARE(stageMemoryBytes(m, r, 1, 3, false, true),
             (4000 + 300) + (1000 + 120) + (2000 + 600) + 500.0);
    QCOMPARE(perLayerBytes(m, r), (1300 + 4300 + 1120 + 2600) / 4.0);
    // Time reads R_l, not W_l: layers 1-2 read 2000 bytes, compute 8000 FLOPs.
    const Device a{"a", "n", 0, 1000, 1000};
    QCOMPARE(stageTimeS(a, m, 1, 2, false), 8.0);
    const Device b{"b", "n", 0, 500, 8000};
    QCOMPARE(stageTimeS(b, m, 1, 2, false), 4.0);  // 2000 / 500
    QCOMPARE(stageTimeS(b, m, 3, 1, true), 5.0);   // (2000 + 500) / 500
    QCOMPARE(rangeCost(m, r, 1, 2).weightBytes, 5000.0);
    QVERIFY_THROWS_EXCEPTION(shoal::Error, rangeCost(m, r, 3, 2));
  }

  void layerSumsAgreeWithTheDirectSums() {
    ModelCost m = model();
    m.layers = 7;
    for (int l = 0; l < 7; ++l) {
      m.perLayer.push_back({100.1 * (l + 1), 33.3 * l, 0.7 * l * l, 3.3, l % 2 ? 5 : 0});
    }
    const Request r{12, 5};
    const LayerSums sums(m, r);
    for (int first = 0; first <= 7; ++first) {
      for (int count = 0; first + count <= 7; ++count) {
        const RangeCost a = sums.range(first, count);
        const RangeCost b = rangeCost(m, r, first, count);
        // Bit for bit: the search and the evaluation of a plan must never disagree on a fit.
        QCOMPARE(a.residentBytes, b.residentBytes);
        QCOMPARE(a.weightBytes, b.weightBytes);
        QCOMPARE(a.readBytes, b.readBytes);
        QCOMPARE(a.flops, b.flops);
      }
    }
  }

  void capacityOfDifferingLayersDependsOnTheRole() {
    // Layers of 1000, 1000, 1000, 3000 and 500 bytes (no KV), embedding 300, head 500; a device
    // of 3500 bytes.
    ModelCost m = model();
    m.layers = 5;
    m.perLayer = {{1000, 1000, 0, 0, 0},
                  {1000, 1000, 0, 0, 0},
                  {1000, 1000, 0, 0, 0},
                  {3000, 3000, 0, 0, 0},
                  {500, 500, 0, 0, 0}};
    const Device c{"c", "n", 3500, 1, 1};
    const Request r{0, 1};
    QCOMPARE(layerCapacity(c, m, r, true, false), 3);   // [0, 3) + 300 = 3300
    QCOMPARE(layerCapacity(c, m, r, false, true), 1);   // [4, 5) + 500; [3, 5) + 500 = 4000
    QCOMPARE(layerCapacity(c, m, r, false, false), 3);  // the longest run anywhere: [0, 3)
    QCOMPARE(layerCapacity(c, m, r, true, true), 2);    // [0, 2) + 800
  }

  void pipelineLatencyAndThroughputFollowTheFormulas() {
    const Pool p = pool();
    const LinkTable links(p);
    const Request r{0, 4};
    const std::vector<StageAssignment> stages{stage(0, 0, 2), stage(1, 2, 6), stage(2, 6, 10)};
    const PipelineMetrics m = evaluatePipeline(p, links, model(), r, stages);
    // a: max(2000/1000, 8000/1000) = 8; b: max(4000/500, 16000/8000) = 8;
    // c (head): max(4500/2000, 25000/2000) = 12.5.
    QCOMPARE(m.stageS, (std::vector<double>{8, 8, 12.5}));
    // a→b on one node: 0.001 + 100/1000 = 0.101; b→c: 0.5 + 100/100 = 1.5; return c→a: 0.5.
    QCOMPARE(m.linkS.size(), size_t{3});
    QVERIFY(qFuzzyCompare(m.linkS[0], 0.101));
    QVERIFY(qFuzzyCompare(m.linkS[1], 1.5));
    QVERIFY(qFuzzyCompare(m.linkS[2], 0.5));
    QVERIFY(qFuzzyCompare(m.latencyS, 8 + 8 + 12.5 + 0.101 + 1.5 + 0.5));
    // X = min(S / T, 1 / slowest) = min(4 / 30.601, 1 / 12.5) = 0.08.
    QVERIFY(qFuzzyCompare(m.throughputTokS, 0.08));
  }

  void prefillPipelinesChunksBehindTheFirst() {
    const Pool p = pool();
    const LinkTable links(p);
    const std::vector<StageAssignment> stages{stage(0, 0, 2), stage(2, 2, 10)};
    // 10 tokens in chunks of 4: 3 chunks of (at most) 4.
    // a: max(2000/1000, 4 × 8000/1000) = 32; c: max(8000/2000, 4 × 32000/2000) = 64, plus the
    // head once: max(500/2000, 9000/2000) = 4.5 -> 68.5; hop a→c: 0.5 + 4 × 100/100 = 4.5;
    // return c→a: 0.5. TTFT = 32 + 4.5 + 68.5 + 0.5 + 2 × 68.5.
    QVERIFY(qFuzzyCompare(prefillTimeS(p, links, model(), stages, 10, 4),
                          32 + 4.5 + 68.5 + 0.5 + 2 * 68.5));
    // One chunk: no pipelining; a one-token prompt is a decode step but for the head's rows.
    QVERIFY(qFuzzyCompare(prefillTimeS(p, links, model(), stages, 4, 512), 32 + 4.5 + 68.5 + 0.5));
    QCOMPARE(prefillTimeS(p, links, model(), stages, 0, 4), 0.0);
  }

  void tokenReturnIsFreeOnOneNode() {
    const Pool p = pool();
    const LinkTable links(p);
    const std::vector<StageAssignment> stages{stage(0, 0, 5), stage(1, 5, 10)};
    const PipelineMetrics m = evaluatePipeline(p, links, model(), Request{0, 1}, stages);
    QCOMPARE(m.linkS.back(), 0.0);
    // S = 1: X = 1 / T.
    QVERIFY(qFuzzyCompare(m.throughputTokS, 1.0 / m.latencyS));
  }

  void planViolationsFindsBrokenPlans() {
    const Pool p = pool();
    const Request r{0, 1};
    Plan plan;
    Pipeline pipe;
    pipe.stages = {stage(0, 0, 4), stage(1, 5, 10)};  // gap at layer 4
    plan.pipelines.push_back(pipe);
    Pipeline second;
    second.stages = {stage(1, 0, 10)};  // b again
    plan.pipelines.push_back(second);
    Pipeline third;
    third.stages = {stage(2, 0, 10)};  // c holds 10 layers + embedding + head in 6000 bytes
    plan.pipelines.push_back(third);
    const auto v = planViolations(p, model(), r, plan);
    auto has = [&](const char* text) {
      for (const auto& s : v) {
        if (s.find(text) != std::string::npos) return true;
      }
      return false;
    };
    QVERIFY(has("starts at layer 5, expected 4"));
    QVERIFY(has("used twice"));
    QVERIFY(has("needs 10800 bytes"));
  }

  void aValidPlanHasNoViolations() {
    Plan plan;
    Pipeline pipe;
    pipe.stages = {stage(0, 0, 4), stage(2, 4, 8), stage(1, 8, 10)};
    plan.pipelines.push_back(pipe);
    QVERIFY(planViolations(pool(), model(), Request{0, 1}, plan).empty());
  }

  void missingLinkIsAnErrorNamingThePair() {
    Pool p = pool();
    p.links.clear();
    try {
      LinkTable links(p);
      QFAIL("expected an error");
    } catch (const shoal::Error& e) {
      QVERIFY2(std::string(e.what()).find("'n1' and 'n2'") != std::string::npos, e.what());
    }
    p.defaultLink = Link{0.1, 10};
    const LinkTable links(p);
    QCOMPARE(links.between(0, 1).latencyS, 0.1);
  }
};

QTEST_GUILESS_MAIN(PlanCostModelTest)
#include "test_plan_cost_model.moc"
